"""Jobs: list, get with every execution, cancel, retry (enqueueing is
``codity.web.endpoints.enqueue``).

Writes go through codity.cancel / retry_job with the guarded project, so the API and any
other client of the SQL API obey one set of rules. Reads select from the tables
(row-level security applies) and filter by the project anyway, joining jobs to queues on
``queue_id``. A job of another project is reported exactly as a missing one. Payload
values are never logged.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, Field

from codity.web.access import Role, Scope
from codity.web.call import Call
from codity.web.endpoint import Endpoint, Reply
from codity.web.fields import QueueName, Strict
from codity.web.lookups import fetch_all, one_or_404, path_id
from codity.web.paging import newest_first

__all__ = ["ROUTES", "Job", "JobStatus", "read_job"]

log = logging.getLogger(__name__)

JobStatus = Literal[
    "scheduled", "queued", "claimed", "running", "completed", "failed", "dead_letter", "cancelled"
]

# ---------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------


class JobListQuery(Strict):
    status: JobStatus | None = None
    queue: QueueName | None = None
    created_after: AwareDatetime | None = None
    created_before: AwareDatetime | None = None
    limit: int = Field(50, ge=1, le=200)
    cursor: str | None = Field(None, max_length=64)


class JobSummary(BaseModel):
    id: int
    queue: str
    task: str
    priority: int
    status: str
    run_at: dt.datetime
    attempt: int
    max_attempts: int
    execution_seq: int
    crash_count: int
    idempotency_key: str | None
    worker_id: int | None
    schedule_id: int | None
    claimed_at: dt.datetime | None
    started_at: dt.datetime | None
    lock_expires_at: dt.datetime | None
    finished_at: dt.datetime | None
    last_error: str | None
    created_at: dt.datetime
    updated_at: dt.datetime


class Job(JobSummary):
    payload: dict[str, Any]


class Execution(BaseModel):
    execution_seq: int
    attempt: int
    status: str
    worker_id: int | None
    claimed_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    attempt_refunded: bool
    error: str | None
    result: Any


class JobDetail(Job):
    executions: list[Execution]


# ---------------------------------------------------------------------------------------
# Queries
# ---------------------------------------------------------------------------------------

_COLUMNS = """
SELECT j.id, q.name AS queue, j.task, j.priority, j.status::text AS status, j.run_at,
       j.attempt, j.max_attempts, j.execution_seq, j.crash_count, j.idempotency_key,
       j.worker_id, j.schedule_id, j.claimed_at, j.started_at, j.lock_expires_at,
       j.finished_at, j.last_error, j.created_at, j.updated_at
"""

_ONE = (
    _COLUMNS
    + """, j.payload, j.queue_id
FROM codity.jobs j
JOIN codity.queues q ON q.id = j.queue_id
WHERE q.project_id = %(project_id)s AND j.id = %(job_id)s
"""
)

_LIST = (
    _COLUMNS
    + """
FROM codity.jobs j
JOIN codity.queues q ON q.id = j.queue_id
WHERE q.project_id = %(project_id)s
  AND (%(status)s::codity.job_status IS NULL OR j.status = %(status)s::codity.job_status)
  AND (%(queue)s::text IS NULL OR q.name = %(queue)s::text)
  AND (%(created_after)s::timestamptz IS NULL OR j.created_at > %(created_after)s::timestamptz)
  AND (%(created_before)s::timestamptz IS NULL OR j.created_at < %(created_before)s::timestamptz)
  AND (%(cursor)s::bigint IS NULL OR j.id < %(cursor)s::bigint)
ORDER BY j.id DESC
LIMIT %(fetch)s
"""
)

_EXECUTIONS = """
SELECT x.execution_seq, x.attempt, x.status::text AS status, x.worker_id, x.claimed_at,
       x.started_at, x.finished_at, x.attempt_refunded, x.error, x.result
FROM codity.job_executions x
JOIN codity.queues q ON q.id = x.queue_id
WHERE q.project_id = %(project_id)s AND x.queue_id = %(queue_id)s AND x.job_id = %(job_id)s
ORDER BY x.execution_seq
"""


async def read_job(call: Call[Any, Any], job_id: int) -> dict[str, Any]:
    """One job of the guarded project with its payload, as the job routes answer it."""
    return await one_or_404(call, _ONE, {"project_id": call.project_id, "job_id": job_id}, "job")


# ---------------------------------------------------------------------------------------
# Handlers
# ---------------------------------------------------------------------------------------


async def list_jobs(call: Call[None, JobListQuery]) -> Reply:
    return await newest_first(call, _LIST, call.query)


async def get_job(call: Call[None, None]) -> dict[str, Any]:
    job = await read_job(call, path_id(call, "job_id", "job"))
    cur = await call.conn.execute(
        _EXECUTIONS,
        {"project_id": call.project_id, "queue_id": job["queue_id"], "job_id": job["id"]},
    )
    job["executions"] = [dict(r) for r in await cur.fetchall()]
    return job


async def cancel_job(call: Call[None, None]) -> dict[str, Any]:
    job_id = path_id(call, "job_id", "job")
    await fetch_all(call, "SELECT job_id FROM codity.cancel(%s, %s)", [job_id, call.project_id])
    log.info("job cancelled", extra={"job_id": job_id})
    return await read_job(call, job_id)


async def retry_job(call: Call[None, None]) -> Reply:
    job_id = path_id(call, "job_id", "job")
    rows = await fetch_all(
        call,
        "SELECT job_id, dead_letter_id FROM codity.retry_job(%s, %s)",
        [job_id, call.project_id],
    )
    log.info(
        "job retried",
        extra={
            "job_id": rows[0]["job_id"],
            "dead_letter_id": rows[0]["dead_letter_id"],
        },
    )
    job = await read_job(call, rows[0]["job_id"])
    return Reply(job, meta={"dead_letter_id": rows[0]["dead_letter_id"]})


_ONE_PATH = "/api/v1/jobs/{job_id:int}"

ROUTES = [
    Endpoint(
        "GET",
        "/api/v1/jobs",
        Scope.PROJECT,
        list_jobs,
        "List jobs, newest first, with filters and keyset pagination",
        "jobs",
        min_role=Role.VIEWER,
        query=JobListQuery,
        response=JobSummary,
        many=True,
        errors=(422,),
    ),
    Endpoint(
        "GET",
        _ONE_PATH,
        Scope.PROJECT,
        get_job,
        "Get a job with every execution",
        "jobs",
        min_role=Role.VIEWER,
        response=JobDetail,
        errors=(404,),
    ),
    Endpoint(
        "POST",
        _ONE_PATH + "/cancel",
        Scope.PROJECT,
        cancel_job,
        "Cancel a job that has not finished",
        "jobs",
        min_role=Role.MEMBER,
        response=Job,
        errors=(404, 409),
    ),
    Endpoint(
        "POST",
        _ONE_PATH + "/retry",
        Scope.PROJECT,
        retry_job,
        "Retry a dead-lettered job with fresh attempts",
        "jobs",
        min_role=Role.MEMBER,
        response=Job,
        errors=(404, 409),
    ),
]
