"""Handlers for the fault tests, loaded by real worker processes.

``codity worker --app tests.fault_tasks:registry`` (with the repository root on
PYTHONPATH). Handlers that must leave a trace write to two tables of the test's own
database, created by :func:`create_tables` and reached through the worker's DATABASE_URL:

    fault_events(job_id, fence, attempt, pid, event, at)   what a handler did, and when
    fault_gates(name)                                      a row named g opens gate g

Tasks:

- ``fault.sleep``: sleep ``payload["seconds"]`` (default 0), return the pid. Load.
- ``fault.hold``: record ``started``; then, when the fence is in ``payload["hold_fences"]``
  (default: every fence), wait until the job's cancel signal is set (``told``), the gate
  ``payload["gate"]`` opens (``gate``; ``{fence}`` in its name is replaced by the fence, so
  each execution can have a gate of its own) or ``payload["timeout_s"]`` passes
  (``timeout``), and record which; a handler the worker cancels with its signal set (its
  lease fence) records ``told`` too. Returns the pid and fence.
- ``fault.suicide``: record ``started``, then SIGKILL its own worker process.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from typing import Any

import psycopg

from codity.worker import JobContext, Registry

__all__ = ["create_tables", "registry"]

registry = Registry()

_TABLES = """
CREATE TABLE IF NOT EXISTS public.fault_events (
    id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id   bigint NOT NULL,
    fence    integer NOT NULL,
    attempt  integer NOT NULL,
    pid      integer NOT NULL,
    event    text NOT NULL,
    at       timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE IF NOT EXISTS public.fault_gates (name text PRIMARY KEY);
"""


def create_tables(conn: psycopg.Connection[Any]) -> None:
    """Create fault_events and fault_gates in the database the workers will use."""
    conn.execute(_TABLES)


def _url() -> str:
    return os.environ["DATABASE_URL"]


async def _record(ctx: JobContext, event: str) -> None:
    async with await psycopg.AsyncConnection.connect(_url(), autocommit=True) as conn:
        await conn.execute(
            "INSERT INTO public.fault_events (job_id, fence, attempt, pid, event) "
            "VALUES (%s, %s, %s, %s, %s)",
            [ctx.job_id, ctx.fence, ctx.attempt, os.getpid(), event],
        )


async def _wait_told(ctx: JobContext, gate: str | None, timeout_s: float) -> str:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    async with contextlib.AsyncExitStack() as stack:
        conn = None
        if gate is not None:
            conn = await stack.enter_async_context(
                await psycopg.AsyncConnection.connect(_url(), autocommit=True)
            )
        while loop.time() < deadline:
            if ctx.is_cancelled:
                return "told"
            if conn is not None:
                cur = await conn.execute("SELECT 1 FROM public.fault_gates WHERE name = %s", [gate])
                if await cur.fetchone():
                    return "gate"
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ctx.cancelled.wait(), 0.05)
    return "timeout"


@registry.task("fault.sleep")
async def sleep(payload: dict[str, Any], ctx: JobContext) -> dict[str, int]:
    await asyncio.sleep(float(payload.get("seconds", 0)))
    return {"pid": os.getpid()}


@registry.task("fault.timed")
async def timed(payload: dict[str, Any], ctx: JobContext) -> dict[str, float]:
    """Sleep, and say when the handler began and ended (the wall clock): the overlaps of
    these intervals are what a concurrency limit bounds."""
    began = time.time()
    await asyncio.sleep(float(payload.get("seconds", 0)))
    return {"began": began, "ended": time.time()}


@registry.task("fault.hold")
async def hold(payload: dict[str, Any], ctx: JobContext) -> dict[str, int]:
    await _record(ctx, "started")
    fences = payload.get("hold_fences")
    if fences is None or ctx.fence in fences:
        gate = payload.get("gate")
        if gate is not None:
            gate = str(gate).replace("{fence}", str(ctx.fence))
        try:
            how = await _wait_told(ctx, gate, float(payload.get("timeout_s", 120)))
        except asyncio.CancelledError:
            # The worker stopped the handler itself: its lease may have run out while it
            # could not heartbeat (frozen, cut off; docs/DESIGN_DECISIONS.md 64). Told too.
            if ctx.is_cancelled:
                await _record(ctx, "told")
            raise
        await _record(ctx, how)
    return {"pid": os.getpid(), "fence": ctx.fence}


@registry.task("fault.suicide")
async def suicide(payload: dict[str, Any], ctx: JobContext) -> None:
    await _record(ctx, "started")
    os.kill(os.getpid(), signal.SIGKILL)
