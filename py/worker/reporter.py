"""The reporter: every outcome of every job goes back to the database through here.

Completions, failures and releases are queued by the job tasks and sent by one loop;
completions are batched (one ``codity.complete_many`` per flush). A flush waits up to
``LINGER_S`` for a batch of the worker's holding (concurrency + prefetch) to gather, as
PGQueuer's status buffer waits for a batch or its timer: at the default capacity of 5,
flushing at every wake-up sent six completions per call, and each call costs the server
and the worker more than the jobs in it (docs/DESIGN_DECISIONS.md 59). A full batch goes at
once, and from the moment the worker starts to drain nothing waits. The reporter owns the
pending set (jobs finished but not yet reported), the heartbeat (whose leases must include
that set), and the one lock that keeps this worker's multi-row writes — a completion batch,
a heartbeat — from running at once and deadlocking each other.

Nothing a job returns can stop the loop. A result that is not JSON, or larger than the
64 KB the database keeps, fails that job at once (not retryable) with the reason; a batch
the database refuses for any reason other than a lost connection is resent job by job, and
the job it refuses is failed the same way. A report is retried only while the database is
unreachable — sending it again is safe: a repeat by the fence's owner is answered
``already_applied`` — and once resolved, either way, its job leaves the pending set, so a
job the worker can no longer finish is never heartbeated again.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Container
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import psycopg
from psycopg.types.json import Jsonb

from codity.backoff import Backoff
from codity.db.deadline import already_waited
from codity.db.errors import TRANSIENT, CodityError
from codity.outage import Outage
from codity.worker.context import JobContext

__all__ = ["COMPLETE_MANY", "MAX_BATCH", "MAX_RESULT_BYTES", "Reporter"]

log = logging.getLogger(__name__)

MAX_BATCH = 500
LINGER_S = 0.005
"""How long finished jobs may wait for others to share their completion call. Their leases
are heartbeated meanwhile, as every unreported job's are."""
MAX_RESULT_BYTES = 65536
_MAX_ERROR = 4000

# The batch commits without waiting for its WAL to reach disk (p_durable => false: the body
# turns synchronous_commit off for its one transaction; docs/DESIGN_DECISIONS.md 44): a
# completion lost to a server crash leaves its job running under this fence, and the
# reaper requeues it (one re-run, fenced), which at-least-once allows. Claims stay durable.
# The statement is the call and nothing else, so that on a Citus cluster it goes whole to
# the node that holds the queue and the setting applies where it commits (Citus delegates
# only a bare SELECT ... FROM fn(...): a WHERE clause would run the body on the coordinator
# statement by statement, under two-phase commit; docs/DESIGN_DECISIONS.md 61). So every
# job's outcome comes back, and the worker looks only at the refusals and repeats.
COMPLETE_MANY = (
    "SELECT c.job_id, c.accepted, c.outcome::text AS outcome, c.detail"
    " FROM codity.complete_many_in_queue(%s, %s::bigint[], %s::integer[], %s::jsonb[],"
    " p_durable => false, p_waited_ms => %s::integer[]) AS c"
)
"""The worker's completion batch: queue id, job ids, fences, results, and how long each job
waited for a slot after its claim (None when none did: JobContext.waited_ms)."""
_FAIL = (
    "SELECT accepted, outcome::text AS outcome, detail"
    " FROM codity.fail_in_queue(%s, %s, %s, %s, %s, p_waited_ms => %s)"
)
_RELEASE = (
    "SELECT r.accepted, r.outcome::text AS outcome, r.detail"
    " FROM codity.release_in_queue(%s, %s, %s) AS r"
)
# A job given back wakes the queue's workers from this side, in a statement of its own: the
# body raises no NOTIFY (DESIGN.md, "Room to scale out", rule 10), and on a Citus cluster
# anything in the call's statement runs on the node that holds the queue, where no worker
# listens. Releases are rare (a drain, a prefetched job given back), so one more round
# trip each costs nothing that matters.
_WAKE = "SELECT pg_catalog.pg_notify('codity_v1', %s::text)"
# With each job's queue: the heartbeat then reads no job to find it (on a Citus cluster, a
# read of every shard; migration 0032).
_HEARTBEAT = (
    "SELECT * FROM codity.heartbeat(%s, %s::bigint[], %s::integer[], p_queue_ids => %s::bigint[])"
)


class Call(Protocol):
    """The worker's database call (Worker._call): a by-queue call names its queue, which on
    a Citus cluster sends it to the node holding the queue (codity.worker.node_routes)."""

    def __call__(
        self, query: str, params: list[Any], *, queue_id: int | None = None
    ) -> Awaitable[list[dict[str, Any]]]: ...


@dataclass(frozen=True, slots=True)
class _Report:
    ctx: JobContext
    kind: Literal["complete", "fail", "release"]
    result: Jsonb | None = None
    error: str = ""
    retryable: bool = True


def _waits(batch: list[JobContext]) -> list[int] | None:
    """Each job's wait for a slot, or None (the usual case) when no job of the batch waited:
    the call then leaves every started_at as the claim wrote it."""
    waits = [ctx.waited_ms for ctx in batch]
    return waits if any(waits) else None


def _encode(result: Any) -> tuple[Jsonb | None, str | None]:
    """The result as the database will store it, or why it cannot be stored."""
    if result is None:
        return None, None
    try:
        text = json.dumps(result, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        return None, f"ResultNotJSON: the handler's result is not JSON ({exc})"
    size = len(text.encode())
    if size > MAX_RESULT_BYTES:
        return None, (
            f"ResultTooLarge: the handler's result is {size} bytes of JSON;"
            f" the limit is {MAX_RESULT_BYTES}"
        )
    return Jsonb(result, dumps=lambda _: text), None


class Reporter:
    def __init__(
        self,
        call: Call,
        server: tuple[str, int] | None = None,
        on_sent: Callable[[], None] = lambda: None,
        batch: int = 1,
        linger_s: float = LINGER_S,
        outage: Outage | None = None,
    ) -> None:
        self._call = call
        self._server = server
        self._on_sent = on_sent
        self._batch = max(1, min(batch, MAX_BATCH))
        self._linger_s = linger_s
        self._outage = outage if outage is not None else Outage(log)
        self._hurry = False
        self._lock = asyncio.Lock()
        self._queue: list[_Report] = []
        self._in_flight: list[_Report] = []
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._giving_up = False

    # -- what the job tasks hand over --------------------------------------------------

    def complete(self, ctx: JobContext, result: Any) -> None:
        encoded, problem = _encode(result)
        if problem is not None:
            ctx.logger.error("%s; failing the job", problem.split(":", 1)[0])
            self.fail(ctx, problem, retryable=False)
            return
        self._add(_Report(ctx, "complete", result=encoded))

    def fail(self, ctx: JobContext, error: str, *, retryable: bool) -> None:
        self._add(_Report(ctx, "fail", error=error[:_MAX_ERROR], retryable=retryable))

    def release(self, ctx: JobContext) -> None:
        self._add(_Report(ctx, "release"))

    def _add(self, report: _Report) -> None:
        self._queue.append(report)
        self._idle.clear()
        # The loop waits for the first report, then for a full batch: not woken per job.
        if len(self._queue) == 1 or len(self._queue) >= self._batch:
            self._wake.set()

    # -- the worker's view ---------------------------------------------------------------

    def pending(self) -> list[JobContext]:
        """Jobs finished but not yet reported: their leases must still be heartbeated."""
        return [r.ctx for r in self._in_flight + self._queue]

    def unsent(self) -> int:
        """How many jobs wait to be reported: the worker counts them against what it may
        hold, so a database slow to take reports slows the claims down with it."""
        return len(self._in_flight) + len(self._queue)

    def give_up(self) -> None:
        """Shutting down with the database unreachable: stop retrying (the reaper requeues
        what was held, attempt refunded)."""
        self._giving_up = True
        self.hurry()

    def hurry(self) -> None:
        """Send every report as soon as it comes from now on: the worker is draining."""
        self._hurry = True
        self._wake.set()

    async def wait_idle(self, timeout: float) -> bool:
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True

    async def heartbeat(
        self, worker_id: int, running: list[JobContext], *, queues: Container[int] | None = None
    ) -> float:
        """Extend the leases of the running and unreported jobs; stop the lost and cancelled.
        Returns the loop time at which the call was sent: the leases it extended last at
        least the queue's lease_seconds from then (codity.worker.leases). ``queues``: the
        queues whose unreported jobs were claimed under ``worker_id``, when the worker has
        several registrations (one per project); None: all of them.

        Raises what the call raises (TRANSIENT, WorkerNotActive): the caller decides."""
        async with self._lock:
            # Taken under the lock: a flush that just ended has left the pending set.
            pending = self.pending()
            if queues is not None:
                pending = [c for c in pending if c.queue_id in queues]
            held = running + pending
            sent_at = asyncio.get_running_loop().time()
            rows = await self._call(
                _HEARTBEAT,
                [
                    worker_id,
                    [c.job_id for c in held],
                    [c.fence for c in held],
                    [c.queue_id for c in held],
                ],
            )
        by_id = {c.job_id: c for c in held}
        for row in rows:
            ctx = by_id.get(row["job_id"])
            if (
                row["state"] in ("cancelled", "lost")
                and ctx is not None
                and ctx.fence == row["fence"]
            ):
                if not ctx.is_cancelled:
                    ctx.logger.warning("%s: stopping", row["state"])
                ctx.cancelled.set()
        return sent_at

    # -- the loop ------------------------------------------------------------------------

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            await self._gather()
            while self._queue:
                self._in_flight = self._queue[:MAX_BATCH]
                del self._queue[:MAX_BATCH]
                # One completion call per queue: the calls take the queue's id (DESIGN.md,
                # "Room to scale out", rule 1).
                by_queue: dict[int, list[_Report]] = {}
                for r in self._in_flight:
                    if r.kind == "complete":
                        by_queue.setdefault(r.ctx.queue_id, []).append(r)
                for completions in by_queue.values():
                    await self._complete(completions)
                for report in self._in_flight:
                    if report.kind != "complete":
                        await self._single(report)
                self._in_flight = []
                self._on_sent()  # room to claim again
            self._idle.set()

    async def _gather(self) -> None:
        """Wait, at most LINGER_S, until a batch's worth of reports is queued."""
        if self._linger_s <= 0:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._linger_s
        while not self._hurry and len(self._queue) < self._batch:
            left = deadline - loop.time()
            if left <= 0:
                return
            self._wake.clear()
            try:
                async with asyncio.timeout(left):
                    await self._wake.wait()
            except TimeoutError:
                return

    async def _send(
        self, what: str, query: str, params: list[Any], queue_id: int
    ) -> list[dict[str, Any]] | None:
        """One call under the lock, resent while the database is unreachable; None when the
        reporter gave up. Other errors propagate."""
        backoff = Backoff()
        while True:
            try:
                async with self._lock:
                    return await self._call(query, params, queue_id=queue_id)
            except TRANSIENT as exc:
                if self._giving_up:
                    log.warning("%s not sent (%s): giving up", what, type(exc).__name__)
                    return None
                # It may have committed before the connection dropped: resending is safe.
                self._outage.failed(what, exc)
                if not already_waited(exc):
                    await backoff.wait(server=self._server)

    async def _complete(self, batch: list[_Report]) -> None:
        params: list[Any] = [
            batch[0].ctx.queue_id,
            [r.ctx.job_id for r in batch],
            [r.ctx.fence for r in batch],
            [r.result for r in batch],
            _waits([r.ctx for r in batch]),
        ]
        try:
            rows = await self._send(
                f"reporting {len(batch)} completion(s)",
                COMPLETE_MANY,
                params,
                batch[0].ctx.queue_id,
            )
        except (CodityError, psycopg.Error) as exc:
            if len(batch) > 1:
                log.warning("a completion batch was refused (%s); resending job by job", exc)
                for report in batch:
                    await self._complete([report])
                return
            report = batch[0]
            reason = f"ResultRefused: the database refused the result ({_describe(exc)})"
            report.ctx.logger.error("%s; failing the job", reason[:200])
            await self._single(_Report(report.ctx, "fail", error=reason, retryable=False))
            return
        if rows is None:
            return
        rows = [row for row in rows if row["outcome"] != "applied"]
        landed = sum(1 for row in rows if row["accepted"])
        if landed:
            log.info("%d completion(s) had landed before the connection dropped", landed)
        for row in rows:
            if not row["accepted"]:
                log.info("completion of job %s refused: %s", row["job_id"], row["detail"])

    async def _single(self, report: _Report) -> None:
        ctx = report.ctx
        if report.kind == "fail":
            query = _FAIL
            params = [ctx.queue_id, ctx.job_id, ctx.fence, report.error, report.retryable,
                      ctx.waited_ms or None]  # fmt: skip
        else:
            query, params = _RELEASE, [ctx.queue_id, ctx.job_id, ctx.fence]
        try:
            rows = await self._send(
                f"{report.kind} of job {ctx.job_id}", query, params, ctx.queue_id
            )
        except (CodityError, psycopg.Error) as exc:
            # E.g. the job was deleted meanwhile (CD003): nothing left to report to.
            ctx.logger.error("%s not reported: %s", report.kind, _describe(exc))
            return
        if not rows:
            return
        row = rows[0]
        if report.kind == "release" and row["outcome"] == "applied":
            await self.wake_queue(ctx.queue_id)
        if not row["accepted"]:
            log.info("%s of job %s refused: %s", report.kind, ctx.job_id, row["detail"])
        elif row["outcome"] == "already_applied":
            log.info(
                "%s of job %s had landed before the connection dropped", report.kind, ctx.job_id
            )

    async def wake_queue(self, queue_id: int) -> None:
        """NOTIFY the queue's workers that a job is back; a hint, so a failure only logs."""
        try:
            await self._call(_WAKE, [queue_id])
        except (CodityError, psycopg.Error) as exc:
            log.info("wake-up for queue %s not sent: %s", queue_id, _describe(exc))


def _describe(exc: BaseException) -> str:
    if isinstance(exc, CodityError):
        return f"{exc.sqlstate}: {exc.message}"
    if isinstance(exc, psycopg.Error) and exc.sqlstate:
        return f"{exc.sqlstate}: {exc.diag.message_primary or exc}"
    return f"{type(exc).__name__}: {exc}"
