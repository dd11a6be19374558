"""The worker process: wake on NOTIFY, claim up to free capacity, run handlers, report back.

All queue logic is in the database; this module only moves jobs between ``codity.*`` calls
and handlers::

    Listener ──wake──▶ claim loop ── claim(p_start) + prefetch ──────────▶ job tasks
    (LISTEN codity_v1,   │ a slow jittered poll                                │
     self-ping)          │ as a safety net                                     ▼
                         │                           handler ── ok / error ──▶ Reporter
    heartbeat loop ── Reporter.heartbeat: every few seconds extends the leases of running
    and unreported jobs; 'cancelled' or 'lost' sets the job's cancel signal (result dropped)

The Reporter (reporter.py) owns every outcome and the worker's one write lock; the Listener
(listener.py) owns the wake-ups; this module owns the claim, the job tasks and shutdown.

Prefetch: the worker holds up to ``prefetch`` claimed jobs beyond its ``concurrency``
(default: three times the concurrency), waiting in memory for a free slot, so the next
claim's round trip overlaps the running handlers instead of following them. A busy worker
claims once half its holding room is free, so claims come in batches. Prefetched jobs are
running in the database from the claim on and heartbeated like the others; on stop they
are released at once (attempt not charged). ``--prefetch 0`` suits long jobs that another
idle worker should rather take (docs/DESIGN_DECISIONS.md 43).

Crash isolation: a job whose lease expired before (``crashes > 0``) may be what killed a
worker. The worker claims such a job only when it runs nothing else and has reported every
job it finished, and claims nothing while one runs, so a job that kills its process takes
no healthy job, and no healthy job's result, down with it.

On stop (SIGTERM/SIGINT) the claim loop ends, in-flight jobs get SHUTDOWN_GRACE_MS to
finish, the rest are cancelled and released (attempt not charged), reports are flushed, the
worker deregisters and the process exits 0. A database that goes away never kills the
worker: every call in every loop is retried with capped backoff (codity.backoff), and the
only errors that end the process are the ones a human must fix at start-up.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import os
import random
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import psycopg
from psycopg.rows import args_row, dict_row
from psycopg_pool import AsyncConnectionPool

from codity import health_file
from codity.backoff import Backoff, server_address
from codity.db.conninfo import POOL_RECONNECT_S, conninfo
from codity.db.deadline import already_waited, answered_within
from codity.db.errors import (
    TRANSIENT,
    CodityError,
    WorkerNotActive,
    closed_if_read_only,
    translate,
)
from codity.outage import Outage
from codity.worker.claim import CLAIM_AND_START, ClaimedJob
from codity.worker.context import JobContext
from codity.worker.empty_queues import EmptyQueues
from codity.worker.fair_share import Credits, by_project, in_turn, shares
from codity.worker.leases import Leases, margin
from codity.worker.limits import Limits
from codity.worker.listener import Listener
from codity.worker.node_routes import NodeRoutes
from codity.worker.registry import Registry, Task
from codity.worker.reporter import Reporter
from codity.worker.served import QueueSpec, Served, registrations

__all__ = ["Worker", "WorkerConfig"]

log = logging.getLogger(__name__)

T = TypeVar("T")
# After the grace period, how long releases and the deregistration may take together. With
# the database unreachable they give up then (the reaper requeues what was held, attempt
# refunded) and the process exits, instead of retrying forever.
_EXIT_REPORTS_S = 5.0
_GIVE_UP_ON: tuple[type[BaseException], ...] = (*TRANSIENT, TimeoutError)
MAX_CLAIM = 1000
"""The most one codity.claim hands out (CD010 above): a worker holding more claims in parts."""
_FENCE_TICK_S = 0.1
"""How often the worker looks for held jobs whose leases may run out (codity.worker.leases)."""
_MAX_CALL_S = 10.0
"""The longest one database call may go unanswered, for leases of 20 s and more; a shorter
lease gives each call half of it, and never less than 1 s (docs/DESIGN_DECISIONS.md 64)."""


@dataclass(frozen=True)
class WorkerConfig:
    queues: tuple[str, ...]
    """``name`` (a queue of ``project_id``'s project), ``project/name`` (a project named by
    slug or id) or ``project/*`` (its every queue): codity.worker.served."""
    concurrency: int = 5
    prefetch: int | None = None
    """Claimed jobs held beyond ``concurrency``, waiting for a slot; None: three times the
    concurrency (the worker holds four times its concurrency, as Celery's default does)."""
    heartbeat_s: float = 5.0
    poll_s: float = 5.0
    grace_s: float = 30.0
    listen: bool = True
    direct_to_nodes: bool = True
    """On a Citus cluster, send each by-queue call to the node holding the queue
    (codity.worker.node_routes); False: every call through the coordinator."""
    name: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    project_id: int | None = None
    """The project of the queues named without one; None: the installation's default."""


@dataclass
class _Running:
    ctx: JobContext
    task: asyncio.Task[None]
    suspect: bool


@dataclass(frozen=True, slots=True)
class _Waiting:
    """A prefetched job: claimed (running in the database), its handler not begun."""

    ctx: JobContext
    payload: Any
    timeout_s: int | None
    suspect: bool
    received: float
    """The event loop's (monotonic) time when the claim's answer came."""


class Worker:
    def __init__(self, url: str, registry: Registry, config: WorkerConfig) -> None:
        if not config.queues:
            raise ValueError("a worker needs at least one queue")
        if config.concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if config.prefetch is not None and config.prefetch < 0:
            raise ValueError("prefetch must be 0 or more")
        self.url = url
        self.registry = registry
        self.config = config
        self._specs = [QueueSpec.parse(q) for q in config.queues]
        # One registration per project served: its worker id (codity.worker.served).
        self._worker_ids: dict[int, int] = {}
        self._project_ids: dict[str | None, int] = {}  # each --queue's project, resolved
        self._served: list[Served] = []  # in the order given; read again at every heartbeat
        # The registration each queue's jobs were claimed under: only ever grows, so a job
        # held from a queue no longer served is still heartbeated and reported.
        self._worker_of_queue: dict[int, int] = {}
        self._limits: dict[int, Limits] = {}  # by queue id
        self._retry_at: float | None = None  # loop time: a limited queue may have room again
        self._server = server_address(url)
        self._pool: AsyncConnectionPool | None = None
        self._routes = NodeRoutes(url, enabled=config.direct_to_nodes)
        self._running: dict[int, _Running] = {}
        self._waiting: collections.deque[_Waiting] = collections.deque()
        prefetch = 3 * config.concurrency if config.prefetch is None else config.prefetch
        self._holds = config.concurrency + prefetch
        # A busy worker claims once half its holding room is free, so each claim (a durable
        # commit) carries a batch; without a prefetch to cover the wait, at every free slot.
        self._low_water = max(1, min(prefetch, self._holds // 2))
        self._wake = asyncio.Event()
        self._outage = Outage(log)  # one warning per outage, from every loop
        self._reporter = Reporter(
            self._call, self._server, on_sent=self._wake.set, batch=self._holds,
            outage=self._outage,
        )  # fmt: skip
        # Marks hold while notifications can undo them: not at all without the listener.
        self._empty = EmptyQueues(config.poll_s if config.listen else 0.0)
        self._leases = Leases()
        self._turn = 0  # claim rounds so far: where the next one starts (fair_share.in_turn)
        self._credits = Credits(cap=self._holds)  # what each queue with a backlog is owed
        self._weights: dict[int, float] = {}  # by queue id (queues.weight); 1 until read
        self._parents_reader = self._read_parents  # bound once, not once per claimed job
        # Queues where a claim failed on a lost connection: it may have committed, and its
        # jobs are given back before the next claim there (codity.release_lost_claims_in_queue).
        self._lost_claims: set[int] = set()
        self._answered_at: float | None = None  # loop time the last answered heartbeat left
        self._listener = Listener(url, self._wake, ping_s=max(1.0, config.heartbeat_s),
                                  heard=self._empty.heard_payload, outage=self._outage)  # fmt: skip
        self._exit_reports_by: float | None = None  # loop time; set when draining starts

    # -- lifecycle -----------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        self._pool = AsyncConnectionPool(
            conninfo(self.url),
            min_size=2,
            max_size=self.config.concurrency + 3,
            reconnect_timeout=POOL_RECONNECT_S,
            kwargs={"autocommit": True, "application_name": "codity-worker"},
            open=False,
        )
        await self._pool.open(wait=False)
        background: list[asyncio.Task[None]] = []
        try:
            if await self._retry(self._register, stop) is None:
                return
            if await self._retry(self._resolve_queues, stop) is None:
                return
            self._warn_of_short_leases()
            health_file.touch()
            log.info(
                "worker %s registered as %s on %s",
                self.config.name,
                ", ".join(str(w) for w in self._worker_ids.values()),
                ", ".join(self.config.queues),
            )
            loops = [
                ("reporter", self._reporter.run),
                ("heartbeat", self._heartbeat_loop),
                ("lease fence", self._fence_loop),
            ]
            if self.config.listen:
                loops.append(("listener", self._listener.run))
            background += [asyncio.create_task(_forever(name, loop)) for name, loop in loops]
            await self._claim_loop(stop)
            await self._drain()
        finally:
            self._reporter.give_up()
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            if self._worker_ids:
                await self._deregister()
            await self._routes.close()
            await self._pool.close()

    async def _register(self) -> bool:
        """Register once in each project served (codity.worker.served); a registration
        made before a lost connection is kept, not made twice."""
        own = None if self.config.project_id is None else str(self.config.project_id)
        project_ids: dict[str | None, int] = {}
        for ref in dict.fromkeys(spec.project for spec in self._specs):
            rows = await self._call(
                "SELECT codity.find_project(%s) AS id", [own if ref is None else ref]
            )
            project_ids[ref] = int(rows[0]["id"])
        self._project_ids = project_ids
        for project_id, names in registrations(self._specs, project_ids).items():
            if project_id in self._worker_ids:
                continue
            rows = await self._call(
                "SELECT codity.register_worker(%s, %s, %s, %s, %s, %s, %s::numeric) AS id",
                [
                    self.config.name,
                    names or [],
                    self.config.concurrency,
                    socket.gethostname(),
                    os.getpid(),
                    project_id,
                    self.config.heartbeat_s,
                ],
            )
            self._worker_ids[project_id] = int(rows[0]["id"])
        return True

    async def _resolve_queues(self) -> bool:
        """The queues this worker serves, with their ids: the calls that write job rows
        take the queue's id (DESIGN.md, "Room to scale out", rule 1). Their limits come with
        them, weights and leases, and are read again with every heartbeat, so a limit set
        later is followed, and a queue made later in a project served whole is served."""
        by_project: dict[int, list[Served]] = {}
        rows: list[dict[str, Any]] = []
        routes: list[dict[str, Any]] = []
        for project_id, worker_id in self._worker_ids.items():
            found = await self._call(
                "SELECT queue_id, queue, max_running, rate_limit, rate_period_seconds,"
                " lease_seconds, weight FROM codity.worker_queues(%s)",
                [worker_id],
            )
            rows += found
            if self.config.direct_to_nodes:
                routes += await self._call(
                    "SELECT queue_id, node_host, node_port FROM codity.queue_nodes(%s)",
                    [worker_id],
                )
            by_project[project_id] = [
                Served(int(r["queue_id"]), r["queue"], project_id, worker_id) for r in found
            ]
        self._limits = {int(row["queue_id"]): Limits.of(row) for row in rows}
        self._weights = {int(row["queue_id"]): float(row["weight"]) for row in rows}
        self._leases.lease_seconds({int(r["queue_id"]): r["lease_seconds"] for r in rows})
        self._served = _in_given_order(self._specs, self._project_ids, by_project)
        self._routes.update(routes)
        for served in self._served:
            self._worker_of_queue[served.queue_id] = served.worker_id
        return True

    def _warn_of_short_leases(self) -> None:
        lease_s = self._leases.shortest()
        if lease_s is not None and 2 * self.config.heartbeat_s > lease_s - margin(lease_s):
            log.warning(
                "a lease of %gs leaves room for fewer than two heartbeats every %gs before this"
                " worker must stop the job's handler on its own clock: beat more often, or"
                " lease for longer",
                lease_s,
                self.config.heartbeat_s,
            )

    async def _deregister(self) -> None:
        for worker_id in self._worker_ids.values():
            try:
                async with asyncio.timeout_at(self._exit_deadline()):
                    rows = await self._call("SELECT codity.deregister_worker(%s) AS n", [worker_id])
            except _GIVE_UP_ON as exc:
                log.warning(
                    "worker %s not deregistered (%s); the sweep will declare it dead",
                    worker_id,
                    type(exc).__name__,
                )
                continue
            released = int(rows[0]["n"])
            log.info(
                "worker %d deregistered%s",
                worker_id,
                f"; {released} job(s) it still held were released" if released else "",
            )

    # -- claiming ------------------------------------------------------------

    async def _claim_loop(self, stop: asyncio.Event) -> None:
        backoff = Backoff()
        while not stop.is_set():
            self._wake.clear()
            try:
                claimed = await self._claim_once()
                backoff.reset()
            except TRANSIENT as exc:
                self._outage.failed("claim", exc)
                if not already_waited(exc):
                    await backoff.wait(server=self._server, stop=stop)
                continue
            except WorkerNotActive:
                # Declared dead while we were unreachable: a heartbeat makes us active again
                # (what was reaped meanwhile stays lost, and the heartbeat says so).
                await self._heartbeat_safely()
                await backoff.wait(server=self._server, stop=stop)
                continue
            if claimed and self._room() > 0 and self._retry_at is None:
                # The jobs just claimed begin first: their handlers' first steps are ready
                # to run, and the next claim's own work would otherwise come before them.
                await asyncio.sleep(0)
                continue
            poll = self.config.poll_s * random.uniform(0.8, 1.2)
            if self._retry_at is not None:  # a limited queue came back short
                poll = min(poll, max(0.0, self._retry_at - asyncio.get_running_loop().time()))
                self._retry_at = None
            await _wait_any(stop, self._wake, timeout=poll)
            if not (self._wake.is_set() or stop.is_set()):
                self._empty.heard(None)  # the safety-net poll: every queue once more

    def _room(self) -> int:
        """How many more jobs this worker may claim now: running and waiting stay within
        concurrency + prefetch, and so do the jobs finished but not yet reported beyond one
        such holding. The unreported count because their leases are held and heartbeated
        too: a database slow to take reports (or a heartbeat that holds the reporter's lock)
        must slow the claims down, or the worker claims on, its unreported jobs and every
        heartbeat's list grow without bound, and each heartbeat takes longer than the last
        (seen in the soak at 13,000 jobs/s: 640,000 jobs claimed and never reported,
        heartbeats of minutes, workers swept). One holding's worth is let through so that
        claims go on while the last batch's reports are on their way, as before: at the
        default capacity counting every one of them cost a fifth of the drain."""
        if any(r.suspect for r in self._running.values()):
            return 0  # a suspect runs alone
        backlog = max(0, self._reporter.unsent() - self._holds)
        return self._holds - len(self._running) - len(self._waiting) - backlog

    def _busy(self) -> bool:
        """Whether this worker holds any job, running or waiting for a slot."""
        return bool(self._running or self._waiting)

    def _held(self) -> list[JobContext]:
        """Every job this worker holds a lease on and has not finished."""
        return [r.ctx for r in self._running.values()] + [w.ctx for w in self._waiting]

    async def _claim_once(self) -> int:
        """One claim round: the free room shared among the queues that may have work, in
        proportion to their weights, starting one queue further along each round
        (codity.worker.fair_share). A queue whose last claim came back short is asked for
        its share; one that filled it banks the share instead, and the most owed of those
        are claimed next, each for at least the low-water mark, while that much room is
        left. One queue per call: see codity.claim."""
        room = self._room()
        if room <= 0 or (self._busy() and room < self._low_water):
            return 0
        self._turn += 1
        suspects = not self._busy() and not self._reporter.unsent()
        asking = [
            served
            for served in in_turn(self._served, self._turn)
            if not self._empty.skip(served.queue_id, suspects=suspects)
        ]
        weights = by_project(
            [s.project_id for s in asking], [self._weights.get(s.queue_id, 1.0) for s in asking]
        )
        fair = shares(room, weights)
        self._credits.earn([s.queue_id for s in asking], fair)
        claimed = 0
        for queue, share in zip(asking, fair, strict=True):
            want = min(share, self._room(), MAX_CLAIM)
            if want > 0 and not self._credits.full(queue.queue_id):
                claimed += await self._claim_counted(queue, want)
        by_id = {s.queue_id: s for s in asking}
        first = True
        for queue_id in self._credits.by_owed(list(by_id)):
            room = self._room()
            if room <= 0 or (not first and room < self._low_water):
                break  # too little for a claim of its own: the next round takes it
            first = False
            want = min(self._credits.want(queue_id, self._low_water), room)
            if room - want < self._low_water:
                want = room  # what would be left is too little for a claim of its own
            claimed += await self._claim_counted(by_id[queue_id], min(want, MAX_CLAIM))
        return claimed

    async def _claim_counted(self, queue: Served, want: int) -> int:
        """Claim up to ``want`` jobs of ``queue`` and count them against what it is owed."""
        got = await self._claim_and_start(queue, want)
        self._credits.claimed(queue.queue_id, want, got)
        return got

    async def _claim_and_start(self, queue: Served, limit: int) -> int:
        queue_id = queue.queue_id
        # A job that crashed a worker before is taken only by an idle worker, and only once
        # everything it finished has been reported: a suspect that kills it would take
        # unsent completions down with it (a report may wait up to 5 ms for a batch), and
        # their jobs would be charged a crash and run again.
        suspects = not self._busy() and not self._reporter.unsent()
        if self._empty.skip(queue_id, suspects=suspects):
            return 0
        if queue_id in self._lost_claims:
            await self._release_lost_claims(queue_id)
        heard = self._empty.before_claim()
        sent_at = asyncio.get_running_loop().time()
        try:
            jobs = await self._call_typed(
                CLAIM_AND_START,
                {"worker": queue.worker_id, "queue_id": queue_id, "limit": limit,
                 "suspects": suspects},
                queue_id=queue_id,
            )  # fmt: skip
        except TRANSIENT:
            self._lost_claims.add(queue_id)
            raise
        self._leases.granted(((job.job_id, queue_id) for job in jobs), sent_at)
        for job in jobs:
            self._accept(queue, job)
        limits = self._limits.get(queue_id)
        if not jobs and (limits is None or not limits.limited):
            self._empty.mark(queue_id, suspects=suspects, since=heard)
        if len(jobs) < limit and limits is not None and limits.limited:
            wait = limits.retry_after(time.time())
            if wait is not None:
                at = asyncio.get_running_loop().time() + wait
                self._retry_at = at if self._retry_at is None else min(self._retry_at, at)
        return len(jobs)

    async def _release_lost_claims(self, queue_id: int) -> None:
        """Give back the jobs a claim took whose answer never came: the database holds them
        under this worker, which knows nothing of them. Every job of the queue the worker
        does know of is listed; raises TRANSIENT like any call (the queue stays marked)."""
        known = [c.job_id for c in self._held() + self._reporter.pending()
                 if c.queue_id == queue_id]  # fmt: skip
        rows = await self._call(
            "SELECT job_id FROM codity.release_lost_claims_in_queue(%s, %s, %s::bigint[])",
            [queue_id, self._worker_of_queue[queue_id], known],
            queue_id=queue_id,
        )
        self._lost_claims.discard(queue_id)
        if rows:
            log.info(
                "gave back %d job(s) of queue %d claimed by a call whose answer was lost: %s",
                len(rows),
                queue_id,
                [row["job_id"] for row in rows],
            )
            await self._reporter.wake_queue(queue_id)

    def _accept(self, queue: Served, job: ClaimedJob) -> None:
        ctx = JobContext(
            job_id=job.job_id,
            attempt=job.attempt,
            fence=job.fence,
            queue=queue.name,
            queue_id=queue.queue_id,
            task=job.task,
            max_attempts=job.max_attempts,
            read_parents=self._parents_reader,
        )
        if job.crashes:
            ctx.logger.warning("its lease expired %d time(s) before: running it alone", job.crashes)
        received = asyncio.get_running_loop().time()
        self._waiting.append(
            _Waiting(ctx, job.payload, job.timeout_seconds, job.crashes > 0, received)
        )
        self._start_waiting()

    async def _read_parents(self, ctx: JobContext) -> list[dict[str, Any]]:
        return await self._call(
            "SELECT node_key, job_id, job_status::text AS status, outcome, result"
            " FROM codity.dep_results(%s, %s, %s)",
            [ctx.queue_id, ctx.job_id, ctx.fence],
        )

    def _start_waiting(self) -> None:
        """Begin waiting jobs, oldest claim first, while a slot is free; never one whose
        lease may have run out (it is given back instead)."""
        now = asyncio.get_running_loop().time()
        while self._waiting and len(self._running) < self.config.concurrency:
            waiting = self._waiting.popleft()
            ctx = waiting.ctx
            if ctx.is_cancelled:  # cancelled or reaped while it waited: nothing to report
                ctx.logger.info("cancelled or lost before it began; not run")
                self._leases.forget(ctx.job_id)
                continue
            if self._leases.stop_by(ctx.job_id) <= now:
                self._give_back(ctx)
                continue
            ctx.waited_ms = max(0, int((now - waiting.received) * 1000))
            task = asyncio.create_task(self._run_job(ctx, waiting.payload, waiting.timeout_s))
            self._running[ctx.job_id] = _Running(ctx, task, waiting.suspect)
            task.add_done_callback(functools.partial(self._finished, ctx.job_id))

    def _finished(self, job_id: int, _task: asyncio.Task[None]) -> None:
        self._running.pop(job_id, None)
        self._leases.forget(job_id)
        self._start_waiting()
        self._wake.set()  # a slot is free: there may be more to claim

    # -- running one job -------------------------------------------------------

    async def _run_job(self, ctx: JobContext, payload: Any, timeout_s: int | None) -> None:
        task = self.registry.get(ctx.task)
        if task is None:
            self._fail(ctx, f"UnknownTask: no handler registered for {ctx.task!r}", retryable=True)
            return
        try:
            async with asyncio.timeout(timeout_s) as budget:
                result = await _invoke(task, payload, ctx)
        except asyncio.CancelledError:
            raise  # drain: the job is released by _drain
        except TimeoutError as exc:
            if budget.expired():
                self._fail(ctx, f"Timeout: handler ran longer than {timeout_s}s", retryable=True)
            else:  # the handler's own TimeoutError: a failure like any other
                self._fail(ctx, f"{type(exc).__name__}: {exc}", retryable=True)
            return
        except Exception as exc:
            retryable = not isinstance(exc, task.non_retryable)
            self._fail(ctx, f"{type(exc).__name__}: {exc}", retryable=retryable)
            return
        if ctx.is_cancelled:
            ctx.logger.info("finished after its cancellation or lease loss; result discarded")
            return
        self._reporter.complete(ctx, result)

    def _fail(self, ctx: JobContext, message: str, *, retryable: bool) -> None:
        if ctx.is_cancelled:
            return
        ctx.logger.warning("failed: %s", message[:200])
        self._reporter.fail(ctx, message, retryable=retryable)

    # -- heartbeat ---------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        backoff = Backoff()
        while True:
            await asyncio.sleep(self.config.heartbeat_s)
            # A heartbeat lost with its connection is sent again at once (backoff capped at
            # 2 s), not at the next beat: after a restart or a switchover every pooled
            # session is dead, and a beat per dead session used up the leases (issue 25).
            while (error := await self._heartbeat_safely()) is not None:
                if not already_waited(error):
                    await backoff.wait(server=self._server)
            backoff.reset()

    async def _heartbeat_safely(self) -> BaseException | None:
        """One heartbeat, and the queues' limits read again; the error when the database
        could not be reached (logged), None otherwise (a refusal is logged: trying again at
        once would not change it). A worker serving several projects beats once for each of
        its registrations, with the jobs held under it."""
        held = self._held()
        several = len(self._worker_ids) > 1
        try:
            for worker_id in self._worker_ids.values():
                mine = held
                if several:
                    mine = [c for c in held if self._worker_of_queue[c.queue_id] == worker_id]
                try:
                    sent_at = await self._reporter.heartbeat(
                        worker_id, mine, queues=self._queues_of(worker_id) if several else None
                    )
                except CodityError as exc:  # CD005: someone deregistered this worker
                    log.error("heartbeat refused: %s (%s)", exc.message, exc.sqlstate)
                    continue
                self._answered_at = sent_at
                # The reporter has set the signal of each job the database said was lost
                # or cancelled: those leases were not extended.
                live = (c for c in mine if not c.is_cancelled)
                self._leases.granted(((c.job_id, c.queue_id) for c in live), sent_at)
            await self._resolve_queues()
            health_file.touch()
        except TRANSIENT as exc:
            self._outage.failed("heartbeat", exc)
            return exc
        except CodityError as exc:  # CD004/CD005 reading the queues of a removed worker
            log.error("heartbeat refused: %s (%s)", exc.message, exc.sqlstate)
        return None

    def _queues_of(self, worker_id: int) -> frozenset[int]:
        """The queues whose jobs were claimed under the registration ``worker_id``."""
        return frozenset(q for q, w in self._worker_of_queue.items() if w == worker_id)

    # -- fencing -----------------------------------------------------------------

    async def _fence_loop(self) -> None:
        """Stop every handler whose lease may run out before a heartbeat could extend it:
        the worker is cut off from the database, or the database does not answer in time.
        Runs on the worker's own clock, since no call can be relied on then."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(_FENCE_TICK_S)
            next_stop = self._leases.next_stop()
            if next_stop is not None and next_stop <= loop.time():
                self._fence(loop.time())

    def _fence(self, now: float) -> None:
        stopped = given_back = 0
        for entry in list(self._running.values()):
            ctx = entry.ctx
            if self._leases.stop_by(ctx.job_id) > now:
                continue
            self._leases.forget(ctx.job_id)
            # Already told by a heartbeat (lost, or cancelled by an operator): nothing of
            # this worker's is left to give back.
            known_lost = ctx.is_cancelled
            ctx.cancelled.set()
            task = self.registry.get(ctx.task)
            if task is not None and task.is_async:
                entry.task.cancel()
            # A thread cannot be stopped: it was told, its result will be dropped, and its
            # slot stays taken until it returns.
            if not known_lost:
                self._reporter.release(ctx)
            stopped += 1
        keep: collections.deque[_Waiting] = collections.deque()
        for waiting in self._waiting:
            if self._leases.stop_by(waiting.ctx.job_id) > now:
                keep.append(waiting)
            elif waiting.ctx.is_cancelled:
                self._leases.forget(waiting.ctx.job_id)
            else:
                self._give_back(waiting.ctx, quiet=True)
                given_back += 1
        self._waiting = keep
        if stopped or given_back:
            since = "no heartbeat answered yet"
            if self._answered_at is not None:
                since = f"no heartbeat answered for {now - self._answered_at:.1f}s"
            log.warning(
                "%s: stopped %d handler(s) and put aside %d held job(s) whose leases may run"
                " out; they are given back once the database answers",
                since,
                stopped,
                given_back,
            )

    def _give_back(self, ctx: JobContext, *, quiet: bool = False) -> None:
        """A held job not begun in time: released (attempt not charged) once the database
        answers, or requeued by the reaper if its lease ran out meanwhile."""
        if not quiet:
            ctx.logger.warning("its lease may have run out before it began: not run")
        self._leases.forget(ctx.job_id)
        ctx.cancelled.set()
        self._reporter.release(ctx)

    # -- draining --------------------------------------------------------------

    async def _drain(self) -> None:
        self._reporter.hurry()
        if self._waiting:
            log.info("releasing %d prefetched job(s) that had not begun", len(self._waiting))
        while self._waiting:
            waiting = self._waiting.popleft()
            if not waiting.ctx.is_cancelled:
                self._reporter.release(waiting.ctx)
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
                self._reporter.release(entry.ctx)
            await asyncio.gather(*(e.task for e in entries), return_exceptions=True)
            if unfinished:
                log.info(
                    "%d job(s) did not finish in time: releasing them (attempt not charged)",
                    len(unfinished),
                )
        left = max(0.0, self._exit_deadline() - asyncio.get_running_loop().time())
        if not await self._reporter.wait_idle(timeout=left):
            self._reporter.give_up()
            log.warning(
                "database unreachable: some reports were not sent; the reaper will requeue"
                " those jobs (attempt refunded)"
            )

    def _exit_deadline(self) -> float:
        """The loop time by which the reports made on the way out must be done."""
        if self._exit_reports_by is None:
            self._exit_reports_by = asyncio.get_running_loop().time() + _EXIT_REPORTS_S
        return self._exit_reports_by

    # -- database ----------------------------------------------------------------

    def _call_deadline(self) -> float:
        """How long one database call may go unanswered: half the shortest lease served,
        from 1 s to 10 s, so that a call stuck on a dead connection is given up and sent
        again, on another, while the leases it would extend still hold."""
        lease_s = self._leases.shortest()
        if lease_s is None:
            return _MAX_CALL_S
        return min(_MAX_CALL_S, max(1.0, lease_s / 2))

    async def _call(
        self, query: str, params: list[Any], *, queue_id: int | None = None
    ) -> list[dict[str, Any]]:
        """One call, answered within :meth:`_call_deadline`. A by-queue call names its
        ``queue_id``: on a Citus cluster it goes to the node holding the queue
        (codity.worker.node_routes); everything else goes to the coordinator."""
        async with self._calling(queue_id) as conn:
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(query, params)
            return await cur.fetchall()

    async def _call_typed(
        self, query: str, params: dict[str, Any], *, queue_id: int
    ) -> list[ClaimedJob]:
        async with self._calling(queue_id) as conn:
            cur = conn.cursor(row_factory=args_row(ClaimedJob))
            await cur.execute(query, params)
            return await cur.fetchall()

    @contextlib.asynccontextmanager
    async def _calling(self, queue_id: int | None) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        assert self._pool is not None
        node = self._routes.pool(queue_id)
        deadline = self._call_deadline()
        try:
            async with (
                (node or self._pool).connection(timeout=deadline) as conn,
                closed_if_read_only(conn),
                answered_within(conn, deadline),
            ):
                yield conn
            self._outage.answered()
        except psycopg.Error as exc:
            if node is not None and queue_id is not None and isinstance(exc, TRANSIENT):
                self._routes.lost(queue_id, exc)
            translated = translate(exc)
            if translated is not None:
                raise translated from exc
            raise

    async def _retry(self, call: Callable[[], Awaitable[T]], stop: asyncio.Event) -> T | None:
        backoff = Backoff()
        while not stop.is_set():
            try:
                return await call()
            except TRANSIENT as exc:
                self._outage.failed("registering", exc)
                if not already_waited(exc):
                    await backoff.wait(server=self._server, stop=stop)
        return None


def _in_given_order(
    specs: list[QueueSpec], project_ids: dict[str | None, int], by_project: dict[int, list[Served]]
) -> list[Served]:
    """The queues served, each once, in the order the specs name them (a project served
    whole: its queues in name order, as codity.worker_queues gives them)."""
    found: dict[int, Served] = {}
    for spec in specs:
        for served in by_project.get(project_ids[spec.project], []):
            if spec.name is None or served.name == spec.name:
                found.setdefault(served.queue_id, served)
    return list(found.values())


async def _forever(name: str, loop: Callable[[], Awaitable[None]]) -> None:
    """Run a background loop; if it ever dies of a bug, say so loudly and start it again."""
    backoff = Backoff(first_s=1.0, cap_s=10.0)
    while True:
        try:
            await loop()
            return
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("the %s loop failed; restarting it", name)
            await backoff.wait()


async def _invoke(task: Task, payload: Any, ctx: JobContext) -> Any:
    if task.is_async:
        return await task.handler(payload, ctx)
    return await asyncio.to_thread(task.handler, payload, ctx)


async def _wait_any(*events: asyncio.Event, timeout: float) -> None:
    waiters = [asyncio.create_task(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*waiters, return_exceptions=True)
