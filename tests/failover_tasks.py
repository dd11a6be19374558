"""The failover drain's handler, loaded by real worker processes
(``codity worker --app tests.failover_tasks:registry``, the repository root on PYTHONPATH).

``failover.run`` records each run durably before it returns, so the test can count how
many times a job's handler ran (beside how many completions the database accepted):

    failover_runs(job_id, fence, attempt, pid, port, at)   one row per handler run

``port`` is the server port the row was written on (which node was primary), ``at`` the
server's clock at the write. Writing one row per job with a connection each would cost
more than the job: the runs of one worker process are written together (a group commit on
one connection, ``INSERT ... ON CONFLICT DO NOTHING``), and each handler returns only
when the batch holding its row has committed. During a failover the write is retried on a
fresh connection (through the worker's own multi-host DATABASE_URL) until it commits; a
retried batch whose first commit was in fact applied adds nothing, (job_id, fence) being
the key.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from typing import Any

import psycopg

from codity.db.conninfo import conninfo
from codity.worker import JobContext, Registry

__all__ = ["TABLES", "registry"]

registry = Registry()

TABLES = """
CREATE TABLE IF NOT EXISTS public.failover_runs (
    job_id   bigint NOT NULL,
    fence    integer NOT NULL,
    attempt  integer NOT NULL,
    pid      integer NOT NULL,
    port     integer NOT NULL DEFAULT inet_server_port(),
    at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (job_id, fence)
);
CREATE TABLE IF NOT EXISTS public.failover_probe (
    id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    port     integer NOT NULL DEFAULT inet_server_port(),
    at       timestamptz NOT NULL DEFAULT clock_timestamp()
);
"""

_INSERT = """
INSERT INTO public.failover_runs (job_id, fence, attempt, pid)
SELECT * FROM unnest(%s::bigint[], %s::integer[], %s::integer[], %s::integer[])
ON CONFLICT (job_id, fence) DO NOTHING
"""
# How long one batch is retried before its handlers fail (the job then retries with
# backoff): far longer than a failover (about 15 s here).
_GIVE_UP_S = 120.0


class _Recorder:
    """Group commit of the handler runs of one worker process."""

    def __init__(self) -> None:
        self.pending: list[tuple[tuple[int, int, int], asyncio.Future[None]]] = []
        self.wakeup = asyncio.Event()
        self.conn: psycopg.AsyncConnection[Any] | None = None
        self.task: asyncio.Task[None] | None = None

    async def record(self, ctx: JobContext) -> None:
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._run())
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.pending.append(((ctx.job_id, ctx.fence, ctx.attempt), done))
        self.wakeup.set()
        await asyncio.shield(done)

    async def _connection(self) -> psycopg.AsyncConnection[Any]:
        if self.conn is None or self.conn.closed or self.conn.broken:
            if self.conn is not None:
                await self.conn.close()
            self.conn = await psycopg.AsyncConnection.connect(
                conninfo(os.environ["DATABASE_URL"], application_name="failover-recorder"),
                autocommit=True,
            )
        return self.conn

    async def _write(self, batch: list[tuple[int, int, int]]) -> None:
        columns = [list(c) for c in zip(*batch, strict=True)]
        pid = os.getpid()
        deadline = time.monotonic() + _GIVE_UP_S
        while True:
            try:
                conn = await self._connection()
                await conn.execute(_INSERT, [*columns, [pid] * len(batch)])
                return
            except psycopg.Error:
                if self.conn is not None:
                    with contextlib.suppress(psycopg.Error):
                        await self.conn.close()
                    self.conn = None
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)

    async def _run(self) -> None:
        while True:
            await self.wakeup.wait()
            self.wakeup.clear()
            batch, self.pending = self.pending, []
            if not batch:
                continue
            try:
                await self._write([row for row, _ in batch])
            except Exception as exc:
                for _, done in batch:
                    if not done.done():
                        done.set_exception(exc)
                continue
            for _, done in batch:
                if not done.done():
                    done.set_result(None)


_recorder: _Recorder | None = None


@registry.task("failover.run")
async def run(payload: dict[str, Any], ctx: JobContext) -> None:
    global _recorder
    if _recorder is None:
        _recorder = _Recorder()
    await _recorder.record(ctx)


# -- failover.long: a job in flight through the failover ----------------------------------------

LONG_TABLE = """
CREATE TABLE IF NOT EXISTS public.failover_long_runs (
    job_id   bigint NOT NULL,
    fence    integer NOT NULL,
    pid      integer NOT NULL,
    began    double precision NOT NULL,
    ended    double precision,
    how      text,
    PRIMARY KEY (job_id, fence)
);
"""


class _Writer:
    """One connection per worker process, one statement at a time, each retried through
    the worker's multi-host URL until it commits (up to ``_GIVE_UP_S``)."""

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.conn: psycopg.AsyncConnection[Any] | None = None

    async def execute(self, query: str, params: list[Any]) -> None:
        deadline = time.monotonic() + _GIVE_UP_S
        async with self.lock:
            while True:
                try:
                    if self.conn is None or self.conn.closed or self.conn.broken:
                        self.conn = await psycopg.AsyncConnection.connect(
                            conninfo(os.environ["DATABASE_URL"], application_name="failover-long"),
                            autocommit=True,
                        )
                    await self.conn.execute(query, params)
                    return
                except psycopg.Error:
                    if self.conn is not None:
                        with contextlib.suppress(psycopg.Error):
                            await self.conn.close()
                        self.conn = None
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.2)


_writer: _Writer | None = None


@registry.task("failover.long")
async def long(payload: dict[str, Any], ctx: JobContext) -> None:
    """Run ``payload["seconds"]`` unless told to stop (``ctx.cancelled``, or cancelled by
    the worker's lease fence), recording when the run began and ended, by the worker's
    clock: two runs of one job overlapping in time is what the test looks for."""
    global _writer
    if _writer is None:
        _writer = _Writer()
    began = time.time()
    await _writer.execute(
        "INSERT INTO public.failover_long_runs (job_id, fence, pid, began) VALUES (%s, %s, %s, %s)"
        " ON CONFLICT DO NOTHING",
        [ctx.job_id, ctx.fence, os.getpid(), began],
    )
    how = "done"
    try:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(ctx.cancelled.wait(), float(payload["seconds"]))
            how = "told"
    except asyncio.CancelledError:
        how = "cancelled"
        raise
    finally:
        await _writer.execute(
            "UPDATE public.failover_long_runs SET ended = %s, how = %s"
            " WHERE job_id = %s AND fence = %s",
            [time.time(), how, ctx.job_id, ctx.fence],
        )
