"""Workers of the project with their liveness: status, heartbeat age, jobs held.

A worker is *alive* when it is active and heartbeated within the sweeper's default
staleness (15 s, three missed 5-second heartbeats): the same rule codity.sweep_workers
applies, so the list agrees with what the scheduler will do next. Read-only; filtered by
project explicitly on top of row-level security.
"""

from __future__ import annotations

import datetime as dt
from typing import Literal

from pydantic import BaseModel, Field

from codity.web.access import Role, Scope
from codity.web.call import Call
from codity.web.endpoint import Endpoint, Reply
from codity.web.fields import Strict
from codity.web.paging import newest_first

__all__ = ["ALIVE_WITHIN_SECONDS", "ROUTES"]

ALIVE_WITHIN_SECONDS = 15
"""codity.sweep_workers' default p_stale_after."""


class WorkerQuery(Strict):
    status: Literal["active", "stopped", "dead"] | None = None
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
    is_alive: bool
    started_at: dt.datetime
    last_heartbeat_at: dt.datetime
    heartbeat_age_seconds: float
    stopped_at: dt.datetime | None
    jobs_held: int


_LIST = """
SELECT w.id, w.name, w.host, w.pid, w.queues, w.capacity, w.status::text AS status,
       (w.status = 'active'
        AND w.last_heartbeat_at > now() - pg_catalog.make_interval(secs => %(alive)s))
           AS is_alive,
       w.started_at, w.last_heartbeat_at,
       greatest(0, extract(epoch FROM now() - w.last_heartbeat_at))::float8
           AS heartbeat_age_seconds,
       w.stopped_at,
       (SELECT count(*) FROM codity.jobs j
        JOIN codity.queues q ON q.id = j.queue_id
        WHERE q.project_id = %(project_id)s AND j.worker_id = w.id
          AND j.status IN ('claimed', 'running')) AS jobs_held
FROM codity.workers w
WHERE w.project_id = %(project_id)s
  AND (%(status)s::codity.worker_status IS NULL OR w.status = %(status)s::codity.worker_status)
  AND (%(cursor)s::bigint IS NULL OR w.id < %(cursor)s::bigint)
ORDER BY w.id DESC
LIMIT %(fetch)s
"""


async def list_workers(call: Call[None, WorkerQuery]) -> Reply:
    return await newest_first(call, _LIST, call.query, alive=ALIVE_WITHIN_SECONDS)


ROUTES = [
    Endpoint(
        "GET",
        "/api/v1/workers",
        Scope.PROJECT,
        list_workers,
        "List the project's workers with their liveness, newest first",
        "workers",
        min_role=Role.VIEWER,
        query=WorkerQuery,
        response=Worker,
        many=True,
        errors=(422,),
    ),
]
