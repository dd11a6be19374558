"""The worker process: wake on NOTIFY, claim up to free capacity, run handlers, report back.

All queue logic is in the database; this module only moves jobs between ``codity.*``
calls and handlers::

    LISTEN codity_v1 ─wake─▶ claim loop ─ claim(queue, free) + start_many ─▶ job tasks
      (own connection;          │ a slow jittered poll                          │
       wakes after every        │ as a safety net                               ▼
       reconnect)               │                 handler ─ ok ──▶ Completer (complete_many)
                                │                         └ error ▶ fail (fenced)
      heartbeat loop: every 5 s extends the leases of running and unreported jobs;
      'cancelled' or 'lost' sets the job's cancel signal and its result is discarded;
      'done' means a report committed whose answer is still on its way (or was lost)

Round trips are batched: one claim and one start_many per batch, in one statement (one
commit before the handlers run), completions flushed together. Heartbeats and completion
batches share a lock so that two multi-row updates of this worker's jobs never run at
once (no lock-order deadlock between them).

On stop (SIGTERM/SIGINT) the claim loop ends, in-flight jobs get SHUTDOWN_GRACE_MS to
finish, the rest are cancelled and released (attempt not charged), completions are
flushed, the worker deregisters and the process exits 0. A database that goes away never
kills the worker: every call retries with capped exponential backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import random
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from codity.db.errors import CodityError, WorkerNotActive, translate
from codity.worker.completer import Completer
from codity.worker.context import JobContext
from codity.worker.registry import Registry, Task

__all__ = ["Worker", "WorkerConfig"]

log = logging.getLogger(__name__)

T = TypeVar("T")
# codity.claim, then codity.start_many on what it claimed, in one statement: one round trip
# and one commit (one WAL flush) between a wakeup and the handlers, and a start that fails
# takes the claim back with it. start_many runs after the claim (its arguments are read
# from it) and sees the claim's rows: a VOLATILE function takes a new snapshot per statement.
# No batch lock: these jobs are not yet known to the heartbeat or the completer.
CLAIM_AND_START = """
WITH claimed AS MATERIALIZED (
    SELECT * FROM codity.claim(%s, %s, %s) WITH ORDINALITY AS c
),
started AS MATERIALIZED (
    SELECT s.job_id, s.accepted
    FROM codity.start_many(ARRAY(SELECT c.job_id FROM claimed c ORDER BY c.ordinality),
                           ARRAY(SELECT c.fence FROM claimed c ORDER BY c.ordinality)) AS s
)
SELECT c.*, s.accepted FROM claimed c JOIN started s ON s.job_id = c.job_id
ORDER BY c.ordinality
"""
TRANSIENT: tuple[type[BaseException], ...] = (psycopg.OperationalError, PoolTimeout)
_MAX_ERROR = 4000
# After the grace period, how long releases and the deregistration may take together. With
# the database unreachable they give up then (the reaper requeues what was held, attempt
# refunded) and the process exits, instead of retrying forever.
_EXIT_REPORTS_S = 5.0


@dataclass(frozen=True)
class WorkerConfig:
    queues: tuple[str, ...]
    concurrency: int = 5
    heartbeat_s: float = 5.0
    poll_s: float = 5.0
    grace_s: float = 30.0
    listen: bool = True
    name: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    project_id: int | None = None


@dataclass
class _Running:
    ctx: JobContext
    task: asyncio.Task[None]


class Worker:
    def __init__(self, url: str, registry: Registry, config: WorkerConfig) -> None:
        if not config.queues:
            raise ValueError("a worker needs at least one queue")
        if config.concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.url = url
        self.registry = registry
        self.config = config
        self.worker_id: int | None = None
        self._pool: AsyncConnectionPool | None = None
        self._running: dict[int, _Running] = {}
        self._wake = asyncio.Event()
        self._closing = asyncio.Event()
        self._batch_lock = asyncio.Lock()
        self._completer = Completer(self._call, self._batch_lock, TRANSIENT)
        self._exit_reports_by: float | None = None  # loop time; set when draining starts

    # -- lifecycle -----------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        self._pool = AsyncConnectionPool(
            self.url,
            min_size=2,
            max_size=self.config.concurrency + 3,
            kwargs={"autocommit": True, "application_name": "codity-worker"},
            open=False,
        )
        await self._pool.open(wait=False)
        background: list[asyncio.Task[None]] = []
        try:
            self.worker_id = await self._retry(self._register, stop)
            if self.worker_id is None:
                return
            log.info(
                "worker %s registered as %d on %s",
                self.config.name,
                self.worker_id,
                self.config.queues,
            )
            background.append(asyncio.create_task(self._completer.run()))
            background.append(asyncio.create_task(self._heartbeat_loop()))
            if self.config.listen:
                background.append(asyncio.create_task(self._listen_loop()))
            await self._claim_loop(stop)
            await self._drain()
        finally:
            self._closing.set()
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            if self.worker_id is not None:
                with contextlib.suppress(*TRANSIENT, TimeoutError):
                    async with asyncio.timeout_at(self._exit_deadline()):
                        released = await self._call(
                            "SELECT codity.deregister_worker(%s) AS n", [self.worker_id]
                        )
                    log.info(
                        "worker %d deregistered (%s job(s) released)",
                        self.worker_id,
                        released[0]["n"],
                    )
            await self._pool.close()

    async def _register(self) -> int:
        rows = await self._call(
            "SELECT codity.register_worker(%s, %s, %s, %s, %s, %s) AS id",
            [
                self.config.name,
                list(self.config.queues),
                self.config.concurrency,
                socket.gethostname(),
                os.getpid(),
                self.config.project_id,
            ],
        )
        return int(rows[0]["id"])

    # -- claiming ------------------------------------------------------------

    async def _claim_loop(self, stop: asyncio.Event) -> None:
        backoff = 0.2
        while not stop.is_set():
            self._wake.clear()
            try:
                claimed = await self._claim_once()
                backoff = 0.2
            except TRANSIENT as exc:
                log.warning("claim failed (%s); retrying in %.1fs", type(exc).__name__, backoff)
                await _wait_any(stop, timeout=backoff)
                backoff = min(backoff * 2, 10.0)
                continue
            except WorkerNotActive:
                # Declared dead while we were unreachable: a heartbeat makes us active again.
                await self._heartbeat_once()
                continue
            if claimed and self._free() > 0:
                continue
            poll = self.config.poll_s * random.uniform(0.8, 1.2)
            await _wait_any(stop, self._wake, timeout=poll)

    def _free(self) -> int:
        return self.config.concurrency - len(self._running)

    async def _claim_once(self) -> int:
        claimed = 0
        for queue in self.config.queues:  # one queue per call: see codity.claim
            free = self._free()
            if free <= 0:
                break
            claimed += await self._claim_and_start(queue, free)
        return claimed

    async def _claim_and_start(self, queue: str, limit: int) -> int:
        rows = await self._call(CLAIM_AND_START, [self.worker_id, queue, limit])
        for row in rows:
            if row["accepted"]:
                self._spawn(queue, row)
            else:
                log.info("job %s was taken back before it started", row["job_id"])
        return len(rows)

    def _spawn(self, queue: str, row: dict[str, Any]) -> None:
        ctx = JobContext(
            job_id=row["job_id"],
            attempt=row["attempt"],
            fence=row["fence"],
            queue=queue,
            task=row["task"],
            max_attempts=row["max_attempts"],
        )
        job = asyncio.create_task(self._run_job(ctx, row["payload"], row["timeout_seconds"]))
        self._running[ctx.job_id] = _Running(ctx, job)
        job.add_done_callback(functools.partial(self._finished, ctx.job_id))

    def _finished(self, job_id: int, _task: asyncio.Task[None]) -> None:
        self._running.pop(job_id, None)
        self._wake.set()  # a slot is free: there may be more to claim

    # -- running one job -------------------------------------------------------

    async def _run_job(self, ctx: JobContext, payload: Any, timeout_s: int | None) -> None:
        task = self.registry.get(ctx.task)
        try:
            if task is None:
                await self._fail(
                    ctx, f"UnknownTask: no handler registered for {ctx.task!r}", retryable=True
                )
                return
            try:
                result = await asyncio.wait_for(_invoke(task, payload, ctx), timeout_s)
            except asyncio.CancelledError:
                raise  # drain: the job is released by _drain
            except TimeoutError:
                await self._fail(
                    ctx, f"Timeout: handler ran longer than {timeout_s}s", retryable=True
                )
                return
            except Exception as exc:
                message = f"{type(exc).__name__}: {exc}"
                await self._fail(ctx, message, retryable=not isinstance(exc, task.non_retryable))
                return
            if ctx.is_cancelled:
                ctx.logger.info("finished after its cancellation or lease loss; result discarded")
                return
            self._completer.add(ctx, _as_json(result))
        except CodityError as exc:
            # E.g. the job was deleted under us (CD003): nothing to report back to.
            ctx.logger.error("abandoned: %s (%s)", exc.message, exc.sqlstate)

    async def _fail(self, ctx: JobContext, message: str, *, retryable: bool) -> None:
        if ctx.is_cancelled:
            return
        ctx.logger.warning("failed: %s", message[:200])
        await self._report(
            "fail",
            "SELECT * FROM codity.fail(%s, %s, %s, %s)",
            [ctx.job_id, ctx.fence, message[:_MAX_ERROR], retryable],
        )

    async def _report(self, call: str, query: str, params: list[Any]) -> bool:
        """A single fenced call, retried while the database is unreachable; True when accepted.

        A connection lost mid-call leaves the outcome unknown: the call may have committed.
        Sending it again is safe, because the database answers a repeat by the fence's owner
        with outcome 'already_applied' and changes nothing.
        """
        backoff = 0.2
        retried = False
        while True:
            try:
                rows = await self._call(query, params)
            except TRANSIENT as exc:
                if self._closing.is_set():
                    return False
                log.warning(
                    "%s of job %s failed (%s); retrying", call, params[0], type(exc).__name__
                )
                retried = True
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            accepted = bool(rows and rows[0]["accepted"])
            if not accepted:
                log.info(
                    "%s of job %s refused: %s", call, params[0], rows[0]["detail"] if rows else ""
                )
            elif retried and rows[0]["outcome"] == "already_applied":
                log.info("%s of job %s had landed before the connection dropped", call, params[0])
            return accepted

    # -- heartbeat ---------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.heartbeat_s)
            try:
                await self._heartbeat_once()
            except TRANSIENT as exc:
                log.warning("heartbeat failed (%s)", type(exc).__name__)

    async def _heartbeat_once(self) -> None:
        async with self._batch_lock:
            # Taken under the lock: a completion flush that just ended has left pending().
            held = [r.ctx for r in self._running.values()] + self._completer.pending()
            rows = await self._call(
                "SELECT * FROM codity.heartbeat(%s, %s::bigint[], %s::integer[])",
                [self.worker_id, [c.job_id for c in held], [c.fence for c in held]],
            )
        by_id = {c.job_id: c for c in held}
        for row in rows:
            ctx = by_id.get(row["job_id"])
            if (
                row["state"] in ("cancelled", "lost")
                and ctx is not None
                and ctx.fence == row["fence"]
            ):
                ctx.logger.warning("%s: stopping", row["state"])
                ctx.cancelled.set()

    # -- waking ----------------------------------------------------------------

    async def _listen_loop(self) -> None:
        backoff = 0.2
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    self.url, autocommit=True, application_name="codity-listener"
                ) as conn:
                    await conn.execute("LISTEN codity_v1")
                    backoff = 0.2
                    self._wake.set()  # notifications sent while we were away are gone
                    async for _notify in conn.notifies():
                        self._wake.set()
            except psycopg.OperationalError as exc:
                log.warning("listener lost its connection (%s); reconnecting", type(exc).__name__)
                await asyncio.sleep(backoff * random.uniform(0.5, 1.0))
                backoff = min(backoff * 2, 10.0)

    # -- draining --------------------------------------------------------------

    async def _drain(self) -> None:
        entries = list(self._running.values())
        if entries:
            log.info("draining %d job(s) for up to %.0fs", len(entries), self.config.grace_s)
            _done, pending = await asyncio.wait(
                [e.task for e in entries], timeout=self.config.grace_s
            )
            unfinished = [e for e in entries if e.task in pending]
            for entry in unfinished:
                entry.ctx.cancelled.set()
                entry.task.cancel()
            try:
                async with asyncio.timeout_at(self._exit_deadline()):
                    for entry in unfinished:
                        await self._report(
                            "release",
                            "SELECT * FROM codity.release(%s, %s)",
                            [entry.ctx.job_id, entry.ctx.fence],
                        )
            except TimeoutError:
                log.warning(
                    "database unreachable: job(s) not released; the reaper will requeue them"
                )
            await asyncio.gather(*(e.task for e in entries), return_exceptions=True)
        if not await self._completer.wait_idle(timeout=max(self.config.grace_s, 5.0)):
            log.warning(
                "some completions could not be reported; their jobs will be reaped and rerun"
            )

    def _exit_deadline(self) -> float:
        """The loop time by which the reports made on the way out must be done."""
        if self._exit_reports_by is None:
            self._exit_reports_by = asyncio.get_running_loop().time() + _EXIT_REPORTS_S
        return self._exit_reports_by

    # -- database ----------------------------------------------------------------

    async def _call(self, query: str, params: list[Any]) -> list[dict[str, Any]]:
        assert self._pool is not None
        try:
            async with self._pool.connection() as conn:
                cur = conn.cursor(row_factory=dict_row)
                await cur.execute(query, params)
                return await cur.fetchall()
        except psycopg.Error as exc:
            translated = translate(exc)
            if translated is not None:
                raise translated from exc
            raise

    async def _retry(self, call: Callable[[], Awaitable[T]], stop: asyncio.Event) -> T | None:
        backoff = 0.2
        while not stop.is_set():
            try:
                return await call()
            except TRANSIENT as exc:
                log.warning(
                    "database unavailable (%s); retrying in %.1fs", type(exc).__name__, backoff
                )
                await _wait_any(stop, timeout=backoff)
                backoff = min(backoff * 2, 10.0)
        return None


async def _invoke(task: Task, payload: Any, ctx: JobContext) -> Any:
    if task.is_async:
        return await task.handler(payload, ctx)
    return await asyncio.to_thread(task.handler, payload, ctx)


def _as_json(result: Any) -> Jsonb | None:
    if result is None or not isinstance(result, dict | list | str | int | float | bool):
        return None
    return Jsonb(result)


async def _wait_any(*events: asyncio.Event, timeout: float) -> None:
    waiters = [asyncio.create_task(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()
