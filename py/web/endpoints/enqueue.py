"""Enqueueing: one job, or up to 1,000 into one queue, all or nothing.

Both go through codity.enqueue / enqueue_many with the guarded project, so the API and any
other client of the SQL API obey one set of rules, idempotency keys included: a repeat
answers 200 with the existing job instead of 201. ``delay_ms`` counts from the
transaction's ``now()``, the clock the SQL functions use. Payload values are never
logged: sizes and keys only.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from typing import Any, Self

from psycopg.types.json import Jsonb
from pydantic import BaseModel, Field, model_validator

from codity.web.access import Limit, Role, Scope
from codity.web.call import Call
from codity.web.endpoint import Endpoint, ReadBack, Reply
from codity.web.endpoints.jobs import Job, job_read_back
from codity.web.fields import BoundedText, QueueName, RunAt, Strict
from codity.web.lookups import fetch_all

__all__ = ["ROUTES"]

log = logging.getLogger(__name__)

MAX_DELAY_MS = 366 * 24 * 3600 * 1000


class JobSpec(Strict):
    task: BoundedText
    payload: dict[str, Any] = Field(default_factory=dict)
    run_at: RunAt | None = None
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


class BatchItem(BaseModel):
    index: int
    """Position in the request's ``jobs`` array, from 0."""
    id: int
    status: str
    run_at: dt.datetime
    is_new: bool


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


async def _database_now(call: Call[Any, Any]) -> dt.datetime:
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


async def enqueue_job(call: Call[EnqueueOne, None]) -> ReadBack:
    body = call.body
    now = await _database_now(call) if body.delay_ms is not None else None
    rows = await fetch_all(
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
    )
    job_id, is_new = rows[0]["job_id"], bool(rows[0]["is_new"])
    log.info(
        "job enqueued",
        extra={
            "job_id": job_id,
            "queue": body.queue,
            "task": body.task,
            "duplicate": not is_new,
            **_payload_shape([body.payload]),
        },
    )
    return job_read_back(job_id, status=201 if is_new else 200, meta={"duplicate": not is_new})


async def enqueue_batch(call: Call[EnqueueBatch, None]) -> Reply:
    body = call.body
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
    rows = await fetch_all(
        call,
        _ENQUEUE_MANY,
        {"queue": body.queue, "jobs": Jsonb(specs), "project_id": call.project_id},
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
            "queue": body.queue,
            "jobs": len(items),
            "jobs_created": created,
            **_payload_shape([s.payload for s in body.jobs]),
        },
    )
    return Reply(
        items,
        status=201 if created else 200,
        meta={"created": created, "duplicates": len(items) - created},
    )


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
]
