"""Jobs: enqueue one or a batch, list, get with every execution, cancel, retry.

Writes go through codity.enqueue / enqueue_many / cancel / retry_job with the guarded
project, so the API and any other client of the SQL API obey one set of rules. Reads
select from the tables (row-level security applies) and filter by the project anyway,
joining jobs to queues on ``queue_id``. A job of another project is reported exactly as a
missing one. Payload values are never logged: sizes and keys only.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import logging
from typing import Annotated, Any, Literal, Self

import psycopg
from psycopg.types.json import Jsonb
from pydantic import AfterValidator, AwareDatetime, BaseModel, Field, model_validator

from codity.db.errors import NotFound, translate
from codity.web.call import Call
from codity.web.endpoint import Endpoint, Limit, Reply, Role, Scope
from codity.web.endpoints.queues import QueueName, Strict
from codity.web.errors import ApiError, not_found

__all__ = [
    "ROUTES",
    "BoundedText",
    "JobStatus",
    "decode_cursor",
    "encode_cursor",
    "fetch_or_404",
    "page_meta",
    "path_id",
]

log = logging.getLogger(__name__)

MAX_ID = 2**63 - 1
MAX_DELAY_MS = 366 * 24 * 3600 * 1000


def _no_nul(value: str) -> str:
    """PostgreSQL text cannot hold NUL; refuse it here as bad input rather than fail later."""
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    return value


BoundedText = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(_no_nul)]
"""A task name, idempotency key or similar short label."""

JobStatus = Literal[
    "scheduled", "queued", "claimed", "running", "completed", "failed", "dead_letter", "cancelled"
]

# ---------------------------------------------------------------------------------------
# Keyset cursors: opaque to clients, the last id of the page underneath.
# ---------------------------------------------------------------------------------------


def encode_cursor(last_id: int) -> str:
    return base64.urlsafe_b64encode(str(last_id).encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> int | None:
    """The id a cursor stands for; 422 when it is not one this API handed out."""
    if cursor is None:
        return None
    invalid = ApiError(
        422,
        "invalid_cursor",
        "the cursor is not valid; use next_cursor from a previous page",
        [{"location": ["query", "cursor"], "message": "not a cursor this API issued"}],
    )
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
    except (binascii.Error, ValueError) as exc:
        raise invalid from exc
    if not raw.isdigit() or not raw.isascii() or len(raw) > 19:
        raise invalid
    value = int(raw)
    if not 1 <= value <= MAX_ID:
        raise invalid
    return value


def page_meta(rows: list[dict[str, Any]], limit: int, key: str = "id") -> dict[str, Any]:
    """Trim the look-ahead row and say where the next page starts (or that there is none)."""
    more = len(rows) > limit
    del rows[limit:]
    return {"next_cursor": encode_cursor(rows[-1][key]) if more else None, "limit": limit}


def path_id(call: Call, name: str, what: str) -> int:
    """An id from the path. One beyond bigint can never exist: answer as for any missing id
    (rather than let the database reject the type)."""
    value = call.path[name]
    if not isinstance(value, int) or not 1 <= value <= MAX_ID:
        raise not_found(what)
    return value


async def fetch_or_404(
    call: Call, query: str, params: dict[str, Any] | list[Any], what: str
) -> list[dict[str, Any]]:
    """Run a codity.* function; its not-found errors become the one not-found answer, so a
    foreign id reads exactly like a missing one."""
    try:
        cur = await call.conn.execute(query, params)
    except psycopg.Error as exc:
        if isinstance(translate(exc), NotFound):
            raise not_found(what) from None
        raise
    return [dict(r) for r in await cur.fetchall()]


# ---------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------


class JobSpec(Strict):
    task: BoundedText
    payload: dict[str, Any] = Field(default_factory=dict)
    run_at: AwareDatetime | None = None
    delay_ms: int | None = Field(None, ge=0, le=MAX_DELAY_MS)
    priority: int = Field(0, ge=-1000, le=1000)
    max_attempts: int | None = Field(None, ge=1, le=1000)
    idempotency_key: BoundedText | None = None

    @model_validator(mode="after")
    def _one_way_to_say_when(self) -> Self:
        if self.run_at is not None and self.delay_ms is not None:
            raise ValueError("give run_at or delay_ms, not both")
        return self


class EnqueueOne(JobSpec):
    queue: QueueName


class EnqueueBatch(Strict):
    queue: QueueName
    jobs: list[JobSpec] = Field(min_length=1, max_length=1000)

    def enqueue_cost(self) -> int:
        """One enqueue rate-limit hit per job (codity.web.mount.Costed)."""
        return len(self.jobs)


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


class BatchItem(BaseModel):
    index: int
    """Position in the request's ``jobs`` array, from 0."""
    id: int
    status: str
    run_at: dt.datetime
    is_new: bool


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

_ENQUEUE = """
SELECT job_id, is_new FROM codity.enqueue(
    %(queue)s, %(task)s, %(payload)s, %(run_at)s, %(priority)s, %(idempotency_key)s,
    %(max_attempts)s, %(project_id)s)
"""

_ENQUEUE_MANY = """
SELECT job_position, job_id, job_status::text AS status, run_at, is_new
FROM codity.enqueue_many(%(queue)s, %(jobs)s, %(project_id)s)
ORDER BY job_position
"""


async def _job(call: Call, job_id: int) -> dict[str, Any]:
    cur = await call.conn.execute(_ONE, {"project_id": call.project_id, "job_id": job_id})
    row = await cur.fetchone()
    if row is None:
        raise not_found("job")
    return dict(row)


async def _database_now(call: Call) -> dt.datetime:
    """The transaction's time, the same ``now()`` the enqueue functions default to."""
    cur = await call.conn.execute("SELECT now() AS now")
    row = await cur.fetchone()
    assert row is not None
    value = row["now"]
    assert isinstance(value, dt.datetime)
    return value


def _run_at(spec: JobSpec, now: dt.datetime | None) -> dt.datetime | None:
    if spec.delay_ms is not None and now is not None:
        return now + dt.timedelta(milliseconds=spec.delay_ms)
    return spec.run_at


def _payload_shape(payloads: list[dict[str, Any]]) -> dict[str, Any]:
    """What may be logged about payloads: their sizes and top-level keys, never values."""
    sizes = [len(json.dumps(p, separators=(",", ":"))) for p in payloads]
    keys = sorted({k for p in payloads for k in p})[:20]
    return {"payload_bytes": sum(sizes), "payload_keys": keys}


# ---------------------------------------------------------------------------------------
# Handlers
# ---------------------------------------------------------------------------------------


async def enqueue_job(call: Call) -> Reply:
    body = call.body
    assert isinstance(body, EnqueueOne)
    now = await _database_now(call) if body.delay_ms is not None else None
    rows = await fetch_or_404(
        call,
        _ENQUEUE,
        {
            "queue": body.queue,
            "task": body.task,
            "payload": Jsonb(body.payload),
            "run_at": _run_at(body, now),
            "priority": body.priority,
            "idempotency_key": body.idempotency_key,
            "max_attempts": body.max_attempts,
            "project_id": call.project_id,
        },
        "queue",
    )
    job_id, is_new = rows[0]["job_id"], bool(rows[0]["is_new"])
    log.info(
        "job enqueued",
        extra={
            "request_id": call.request_id,
            "job_id": job_id,
            "queue": body.queue,
            "task": body.task,
            "duplicate": not is_new,
            **_payload_shape([body.payload]),
        },
    )
    job = await _job(call, job_id)
    return Reply(job, status=201 if is_new else 200, meta={"duplicate": not is_new})


async def enqueue_batch(call: Call) -> Reply:
    body = call.body
    assert isinstance(body, EnqueueBatch)
    now = await _database_now(call) if any(s.delay_ms is not None for s in body.jobs) else None
    specs = []
    for spec in body.jobs:
        item: dict[str, Any] = {"task": spec.task, "payload": spec.payload}
        run_at = _run_at(spec, now)
        if run_at is not None:
            item["run_at"] = run_at.isoformat()
        if spec.priority:
            item["priority"] = spec.priority
        if spec.max_attempts is not None:
            item["max_attempts"] = spec.max_attempts
        if spec.idempotency_key is not None:
            item["idempotency_key"] = spec.idempotency_key
        specs.append(item)
    rows = await fetch_or_404(
        call,
        _ENQUEUE_MANY,
        {"queue": body.queue, "jobs": Jsonb(specs), "project_id": call.project_id},
        "queue",
    )
    items = [
        {
            "index": r["job_position"] - 1,
            "id": r["job_id"],
            "status": r["status"],
            "run_at": r["run_at"],
            "is_new": r["is_new"],
        }
        for r in rows
    ]
    created = sum(1 for i in items if i["is_new"])
    log.info(
        "jobs enqueued",
        extra={
            "request_id": call.request_id,
            "queue": body.queue,
            "jobs": len(items),
            "created": created,
            **_payload_shape([s.payload for s in body.jobs]),
        },
    )
    return Reply(
        items,
        status=201 if created else 200,
        meta={"created": created, "duplicates": len(items) - created},
    )


async def list_jobs(call: Call) -> Reply:
    query = call.query
    assert isinstance(query, JobListQuery)
    cur = await call.conn.execute(
        _LIST,
        {
            "project_id": call.project_id,
            "status": query.status,
            "queue": query.queue,
            "created_after": query.created_after,
            "created_before": query.created_before,
            "cursor": decode_cursor(query.cursor),
            "fetch": query.limit + 1,
        },
    )
    rows = [dict(r) for r in await cur.fetchall()]
    meta = page_meta(rows, query.limit)
    return Reply(rows, meta=meta)


async def get_job(call: Call) -> dict[str, Any]:
    job = await _job(call, path_id(call, "job_id", "job"))
    cur = await call.conn.execute(
        _EXECUTIONS,
        {"project_id": call.project_id, "queue_id": job["queue_id"], "job_id": job["id"]},
    )
    job["executions"] = [dict(r) for r in await cur.fetchall()]
    return job


async def cancel_job(call: Call) -> dict[str, Any]:
    job_id = path_id(call, "job_id", "job")
    await fetch_or_404(
        call, "SELECT job_id FROM codity.cancel(%s, %s)", [job_id, call.project_id], "job"
    )
    log.info("job cancelled", extra={"request_id": call.request_id, "job_id": job_id})
    return await _job(call, job_id)


async def retry_job(call: Call) -> Reply:
    job_id = path_id(call, "job_id", "job")
    rows = await fetch_or_404(
        call,
        "SELECT job_id, dead_letter_id FROM codity.retry_job(%s, %s)",
        [job_id, call.project_id],
        "job",
    )
    log.info(
        "job retried",
        extra={
            "request_id": call.request_id,
            "job_id": rows[0]["job_id"],
            "dead_letter_id": rows[0]["dead_letter_id"],
        },
    )
    job = await _job(call, rows[0]["job_id"])
    return Reply(job, meta={"dead_letter_id": rows[0]["dead_letter_id"]})


_ONE_PATH = "/api/v1/jobs/{job_id:int}"
_EXAMPLE = {
    "queue": "emails",
    "task": "emails.send",
    "payload": {"to": "a@example.com"},
    "priority": 0,
    "idempotency_key": "welcome-42",
}

ROUTES = [
    Endpoint(
        "POST",
        "/api/v1/jobs",
        Scope.PROJECT,
        enqueue_job,
        "Enqueue a job (an idempotent repeat returns the existing job with 200)",
        "jobs",
        min_role=Role.MEMBER,
        body=EnqueueOne,
        response=Job,
        status=201,
        limit=Limit.ENQUEUE,
        errors=(200, 404, 429),
        example=_EXAMPLE,
    ),
    Endpoint(
        "POST",
        "/api/v1/jobs/batch",
        Scope.PROJECT,
        enqueue_batch,
        "Enqueue up to 1,000 jobs into one queue, all or nothing",
        "jobs",
        min_role=Role.MEMBER,
        body=EnqueueBatch,
        response=BatchItem,
        many=True,
        status=201,
        limit=Limit.ENQUEUE,
        errors=(200, 404, 429),
        example={
            "queue": "emails",
            "jobs": [
                {"task": "emails.send", "payload": {"to": "a@example.com"}},
                {"task": "emails.send", "payload": {"to": "b@example.com"}, "delay_ms": 60000},
            ],
        },
    ),
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
