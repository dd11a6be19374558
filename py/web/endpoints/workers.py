"""Workers of the project with their liveness, uptime and jobs; one worker with the jobs it
holds and the jobs it gave back to the queue.

Liveness is read against the same rules the engine applies, at the transaction's ``now()``:

- ``stopped``: it deregistered (``status = 'stopped'``, a clean drain);
- ``dead``: ``codity.sweep_workers`` declared it dead (``status = 'dead'``), or it is still
  ``active`` but silent for longer than the installation's ``worker_dead_after``
  (``codity.settings``, 15 s by default) — exactly the predicate the sweeper uses, so the
  list says "dead" from the moment the next ``codity.tick`` would declare it so;
- ``stale``: ``active``, not yet dead, but silent for longer than two of the heartbeat
  intervals it declared at registration (``workers.heartbeat_seconds``): it has missed two
  heartbeats in a row. ``register_worker`` and ``configure`` ensure ``worker_dead_after``
  allows two heartbeats, so stale always comes before dead;
- ``alive``: every other active worker.

``is_alive`` is true for alive and stale workers: not (yet) dead, what the overview counts.

Uptime stops when the worker does: up to ``stopped_at`` for a stopped worker, up to its
last heartbeat for a dead or stale one (the last moment it was known to be running; a swept
worker's ``stopped_at`` is only when the sweeper noticed), up to ``now()`` for a live one.
So a dead worker's uptime is the same on every read.

Counts that could be large are capped at ``codity.count_cap()``. Read-only; every query
filters by project explicitly on top of row-level security, so another project's worker
answers exactly like a missing one.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from pydantic import BaseModel, Field

from codity.web.access import Role, Scope
from codity.web.call import Call
from codity.web.endpoint import Endpoint, Reply
from codity.web.fields import Strict
from codity.web.lookups import one_or_404, path_id
from codity.web.paging import newest_first

__all__ = ["HELD_JOBS_SHOWN", "LIVENESS", "RETURNED_JOBS_SHOWN", "ROUTES"]

HELD_JOBS_SHOWN = 200
"""At most this many held jobs in a worker's detail (``jobs_held`` counts them all)."""

RETURNED_JOBS_SHOWN = 50
"""At most this many returned jobs in a worker's detail, newest first."""

Liveness = Literal["alive", "stale", "dead", "stopped"]


class WorkerQuery(Strict):
    status: Literal["active", "stopped", "dead"] | None = None
    live: bool | None = None
    """true: only workers not (yet) dead, i.e. alive or stale; false: only dead or stopped."""
    limit: int = Field(100, ge=1, le=500)
    cursor: str | None = Field(None, max_length=64)


class Worker(BaseModel):
    id: int
    name: str
    host: str
    pid: int | None
    queues: list[str]
    capacity: int
    status: str
    liveness: Liveness
    is_alive: bool
    heartbeat_seconds: float
    started_at: dt.datetime
    last_heartbeat_at: dt.datetime
    heartbeat_age_seconds: float
    stopped_at: dt.datetime | None
    uptime_seconds: float
    jobs_held: int
    jobs_held_capped: bool


class HeldJob(BaseModel):
    id: int
    queue: str
    task: str
    status: str
    claimed_at: dt.datetime
    lock_expires_at: dt.datetime


class ReturnedJob(BaseModel):
    """One execution the worker gave back, its attempt refunded: ``reaped`` (its lease ran
    out, e.g. the worker died) or ``released`` (the worker gave it back while draining)."""

    job_id: int
    queue: str
    task: str
    execution_seq: int
    attempt: int
    status: Literal["reaped", "released"]
    claimed_at: dt.datetime
    finished_at: dt.datetime
    job_status: str
    """The job's state now (queued again, running elsewhere, completed, ...)."""


class WorkerDetail(Worker):
    held_jobs: list[HeldJob]
    returned_jobs: list[ReturnedJob]


# A worker's liveness (as ``l.liveness``, for a query over ``codity.workers w``):
# sweep_workers' predicate (strict <, against worker_dead_after) plus the stale rule.
LIVENESS = """
CROSS JOIN LATERAL (
    SELECT CASE
        WHEN w.status = 'stopped' THEN 'stopped'
        WHEN w.status = 'dead' OR w.last_heartbeat_at < now() - st.worker_dead_after
            THEN 'dead'
        WHEN w.last_heartbeat_at
             < now() - pg_catalog.make_interval(secs => 2 * w.heartbeat_seconds)
            THEN 'stale'
        ELSE 'alive'
    END AS liveness
    FROM codity.settings st
) l"""


def _workers(where: str) -> str:
    """Workers of the project (``where``: more conditions, order and limit on ``w``) with
    their liveness, uptime and capped held-job count.

    The workers are read first and their held jobs counted after, for those workers only
    (two fenced CTEs), rather than by a count correlated from each worker row: on a Citus
    cluster the workers are a reference table and the jobs are distributed by queue, and
    Citus plans no subquery correlated from the one into the other on a column that is not
    the queue. The count reads jobs_worker_idx (partial on claimed and running, the jobs
    workers hold: a worker claims no more than its free capacity), so it needs no stop of
    its own; it is capped when answered all the same."""
    return (
        """
WITH w AS MATERIALIZED (
    SELECT w.*, l.liveness
    FROM codity.workers w"""
        + LIVENESS
        + """
    WHERE w.project_id = %(project_id)s"""
        + where
        + """
), h AS MATERIALIZED (
    SELECT j.worker_id, count(*) AS held
    FROM codity.jobs j
    JOIN codity.queues q ON q.id = j.queue_id
    WHERE j.worker_id IN (SELECT w.id FROM w) AND j.status IN ('claimed', 'running')
      AND q.project_id = %(project_id)s
    GROUP BY j.worker_id
)
SELECT w.id, w.name, w.host, w.pid, w.queues, w.capacity, w.status::text AS status,
       w.liveness, w.liveness IN ('alive', 'stale') AS is_alive,
       w.heartbeat_seconds::float8 AS heartbeat_seconds,
       w.started_at, w.last_heartbeat_at,
       greatest(0, extract(epoch FROM now() - w.last_heartbeat_at))::float8
           AS heartbeat_age_seconds,
       w.stopped_at,
       greatest(0, extract(epoch FROM
           CASE w.liveness
               WHEN 'alive' THEN now()
               WHEN 'stopped' THEN w.stopped_at
               ELSE w.last_heartbeat_at
           END - w.started_at))::float8 AS uptime_seconds,
       least(coalesce(h.held, 0), codity.count_cap()) AS jobs_held,
       coalesce(h.held, 0) > codity.count_cap() AS jobs_held_capped
FROM w
LEFT JOIN h ON h.worker_id = w.id
ORDER BY w.id DESC
"""
    )


_LIST = _workers(
    """
      AND (%(status)s::codity.worker_status IS NULL
           OR w.status = %(status)s::codity.worker_status)
      AND (%(live)s::boolean IS NULL OR (l.liveness IN ('alive', 'stale')) = %(live)s::boolean)
      AND (%(cursor)s::bigint IS NULL OR w.id < %(cursor)s::bigint)
    ORDER BY w.id DESC
    LIMIT %(fetch)s"""
)

_ONE = _workers("\n      AND w.id = %(worker_id)s")

# Held jobs come from jobs_worker_idx (partial on claimed/running), oldest claim first.
_HELD = """
SELECT j.id, q.name AS queue, j.task, j.status::text AS status, j.claimed_at, j.lock_expires_at
FROM codity.jobs j
JOIN codity.queues q ON q.id = j.queue_id
WHERE j.worker_id = %(worker_id)s AND j.status IN ('claimed', 'running')
  AND q.project_id = %(project_id)s
ORDER BY j.claimed_at, j.id
LIMIT %(limit)s
"""

# Refunded executions come from job_executions_refunded_idx (worker_id, claimed_at), partial
# on attempt_refunded, read backwards: newest first.
_RETURNED = """
SELECT e.job_id, q.name AS queue, j.task, e.execution_seq, e.attempt, e.status::text AS status,
       e.claimed_at, e.finished_at, j.status::text AS job_status
FROM codity.job_executions e
JOIN codity.jobs j ON j.id = e.job_id AND j.queue_id = e.queue_id
JOIN codity.queues q ON q.id = e.queue_id
WHERE e.worker_id = %(worker_id)s AND e.attempt_refunded
  AND q.project_id = %(project_id)s
ORDER BY e.claimed_at DESC, e.job_id DESC, e.execution_seq DESC
LIMIT %(limit)s
"""


async def list_workers(call: Call[None, WorkerQuery]) -> Reply:
    return await newest_first(call, _LIST, call.query)


async def get_worker(call: Call[None, None]) -> dict[str, Any]:
    params = {"project_id": call.project_id, "worker_id": path_id(call, "worker_id", "worker")}
    worker = await one_or_404(call, _ONE, params, "worker")
    cur = await call.conn.execute(_HELD, {**params, "limit": HELD_JOBS_SHOWN})
    held = [dict(r) for r in await cur.fetchall()]
    cur = await call.conn.execute(_RETURNED, {**params, "limit": RETURNED_JOBS_SHOWN})
    returned = [dict(r) for r in await cur.fetchall()]
    return {**worker, "held_jobs": held, "returned_jobs": returned}


ROUTES = [
    Endpoint(
        "GET",
        "/api/v1/workers",
        Scope.PROJECT,
        list_workers,
        "List the project's workers with their liveness, uptime and jobs held, newest first",
        "workers",
        min_role=Role.VIEWER,
        query=WorkerQuery,
        response=Worker,
        many=True,
        errors=(422,),
    ),
    Endpoint(
        "GET",
        "/api/v1/workers/{worker_id:int}",
        Scope.PROJECT,
        get_worker,
        "One worker: its liveness, the jobs it holds and the jobs it gave back to the queue",
        "workers",
        min_role=Role.VIEWER,
        response=WorkerDetail,
        errors=(404,),
    ),
]
