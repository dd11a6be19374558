"""Jobs: list with filters and capped counts, get with its whole history, cancel, retry
(enqueueing is ``codity.web.endpoints.enqueue``, bulk actions ``jobs_bulk``).

Writes go through codity.cancel / retry_job with the guarded project, so the API and any
other client of the SQL API obey one set of rules. Reads select from the tables
(row-level security applies) and filter by the project anyway, joining jobs to queues on
``queue_id``. A job of another project is reported exactly as a missing one. Payload
values are never logged.

A list at a million jobs: the project's queues are walked one by one (a LATERAL per
queue), each in id order through ``(queue_id, status, id)`` or ``(queue_id, id DESC)``,
and merged newest first, so a page reads about one page of index entries per queue and
never sorts the table. Payload filters are jsonb containment (``payload @> ...``), which
the GIN index ``jobs_payload_idx`` answers through ``codity.jobs_with_payload`` (under
row-level security ``@>`` could never use it; the ids it returns are an index condition,
the newest 100,000 matches at most). Counts stop at ``codity.count_cap()`` (a
``LIMIT`` in a subquery), so no read here counts an unbounded set. The filter queries run
unprepared: each is planned for the values given (an unused filter folds away, and a
payload filter can choose its index), never with a generic plan that fits none of them.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from typing import Annotated, Any, Literal, get_args

from psycopg.types.json import Jsonb
from pydantic import AwareDatetime, BaseModel, BeforeValidator, Field, WithJsonSchema

from codity.web.access import Role, Scope
from codity.web.call import Call
from codity.web.endpoint import Endpoint, ReadBack, Reply
from codity.web.endpoints.job_history import DeadLetterRecord, FenceRejection, TimelineEvent
from codity.web.endpoints.job_history import timeline as job_timeline
from codity.web.endpoints.queue_walk import QUEUE_MATCH, QUEUES, settled, shares
from codity.web.fields import MAX_ID, BoundedText, QueueName, Strict
from codity.web.inputs import json_depth
from codity.web.lookups import fetch_all, one_or_404, path_id
from codity.web.paging import decode_id_cursor, page_meta

__all__ = [
    "JOB_MATCH",
    "JOB_STATUSES",
    "ROUTES",
    "TABS",
    "Job",
    "JobFilter",
    "JobId",
    "JobMatch",
    "JobStatus",
    "job_read_back",
    "match_params",
    "match_query",
    "read_job",
]

log = logging.getLogger(__name__)

JobStatus = Literal[
    "waiting",
    "scheduled",
    "queued",
    "claimed",
    "running",
    "completed",
    "failed",
    "dead_letter",
    "cancelled",
]
JOB_STATUSES: tuple[str, ...] = get_args(JobStatus)

TABS: dict[str, tuple[str, ...] | None] = {
    "all": None,
    "waiting": ("waiting",),
    "scheduled": ("scheduled",),
    "queued": ("queued",),
    "running": ("claimed", "running"),
    "completed": ("completed",),
    "dead_letter": ("dead_letter",),
    "cancelled": ("cancelled",),
}
"""The states an operator tells apart, and the job statuses each one counts. "failed" has
no tab: a failed job is rescheduled or dead-lettered in the same transaction."""

_PAYLOAD_TEXT_MAX = 4096
_PAYLOAD_DEPTH_MAX = 16

# ---------------------------------------------------------------------------------------
# Filters
# ---------------------------------------------------------------------------------------


def _split_statuses(value: Any) -> Any:
    """``claimed,running`` in a query string is a list of two statuses."""
    if isinstance(value, str):
        return [part.strip() for part in value.split(",")]
    return value


def _json_object(value: Any) -> Any:
    """A payload filter: a JSON object, given as text (query string) or as JSON (body)."""
    if isinstance(value, str):
        if len(value) > _PAYLOAD_TEXT_MAX:
            raise ValueError(f"payload must be at most {_PAYLOAD_TEXT_MAX} characters of JSON")
        try:
            value = json.loads(value)
        except ValueError:
            raise ValueError(
                'payload must be a JSON object, e.g. {"customer": {"id": 42}}'
            ) from None
    if not isinstance(value, dict):
        raise ValueError('payload must be a JSON object, e.g. {"customer": {"id": 42}}')
    if json_depth(value) > _PAYLOAD_DEPTH_MAX:
        raise ValueError(f"payload must nest at most {_PAYLOAD_DEPTH_MAX} levels deep")
    return value


Statuses = Annotated[
    list[JobStatus],
    BeforeValidator(_split_statuses),
    Field(min_length=1, max_length=len(JOB_STATUSES)),
    WithJsonSchema(
        {
            "type": "string",
            "description": "one status, or several separated by commas (claimed,running)",
        }
    ),
]
PayloadFilter = Annotated[
    dict[str, Any],
    BeforeValidator(_json_object),
    WithJsonSchema(
        {
            "type": "string",
            "description": "a JSON object; jobs whose payload contains it (jsonb @>)",
        }
    ),
]
JobId = Annotated[int, Field(ge=1, le=MAX_ID)]


class JobMatch(Strict):
    """What a job must match, its state aside (the counts are per state)."""

    queue: QueueName | None = None
    task: BoundedText | None = None
    id: JobId | None = None
    worker_id: JobId | None = None
    payload: PayloadFilter | None = None
    created_after: AwareDatetime | None = None
    created_before: AwareDatetime | None = None
    finished_after: AwareDatetime | None = None
    finished_before: AwareDatetime | None = None


class JobFilter(JobMatch):
    status: Statuses | None = None


class JobListQuery(JobFilter):
    limit: int = Field(50, ge=1, le=200)
    cursor: str | None = Field(None, max_length=64)
    count: bool = Field(
        True,
        description="false: leave meta.count out (a caller that has it from /jobs/counts)",
    )


def match_query(query: str, params: dict[str, Any]) -> str:
    """``query`` (built with :data:`JOB_MATCH`) for these parameters: without the payload
    line when the filter has no payload."""
    return query if params["payload"] is not None else query.replace(PAYLOAD_MATCH, "\n")


def match_params(match: JobMatch, project_id: int) -> dict[str, Any]:
    """The parameters of :data:`QUEUE_MATCH` and :data:`JOB_MATCH` for a filter."""
    params = match.model_dump(include=set(JobFilter.model_fields))
    params.setdefault("status", None)
    params["payload"] = None if match.payload is None else Jsonb(match.payload)
    params["project_id"] = project_id
    return params


PAYLOAD_MATCH = """
  AND j.id = ANY(ARRAY(SELECT codity.jobs_with_payload(%(payload)s::jsonb, %(project_id)s)))
"""
"""The payload line of :data:`JOB_MATCH`, in a query only when the filter has a payload
(:func:`match_query`): Citus runs an uncorrelated subquery before the query that holds it,
whatever guards it, so with a ``%(payload)s IS NULL OR`` in front the function would still
be called, and refuse the NULL filter."""

JOB_MATCH = (
    """
  AND (%(status)s::codity.job_status[] IS NULL
       OR j.status = ANY(%(status)s::codity.job_status[]))
  AND (%(task)s::text IS NULL OR j.task = %(task)s::text)
  AND (%(id)s::bigint IS NULL OR j.id = %(id)s::bigint)
  AND (%(worker_id)s::bigint IS NULL OR j.worker_id = %(worker_id)s::bigint)"""
    + PAYLOAD_MATCH
    + """  AND (%(created_after)s::timestamptz IS NULL
       OR j.created_at > %(created_after)s::timestamptz)
  AND (%(created_before)s::timestamptz IS NULL OR j.created_at < %(created_before)s::timestamptz)
  AND (%(finished_after)s::timestamptz IS NULL OR j.finished_at > %(finished_after)s::timestamptz)
  AND (%(finished_before)s::timestamptz IS NULL
       OR j.finished_at < %(finished_before)s::timestamptz)
"""
)
"""The rest of a filter, as lines after ``WHERE j.queue_id = t.queue_id`` (alias ``j``)."""

# ---------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------


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
    schedule_name: str | None = None
    executions: list[Execution]
    dead_letters: list[DeadLetterRecord]
    fence_rejections: list[FenceRejection]
    """The latest 100, newest first."""
    timeline: list[TimelineEvent]


class StateCount(BaseModel):
    state: str
    statuses: list[str] | None
    count: int
    capped: bool
    """True: there are more than ``count`` (the cap)."""


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
    + """, j.payload, j.queue_id, s.name AS schedule_name
FROM codity.jobs j
JOIN codity.queues q ON q.id = j.queue_id
LEFT JOIN codity.scheduled_jobs s ON s.id = j.schedule_id AND s.project_id = q.project_id
WHERE q.project_id = %(project_id)s AND j.id = %(job_id)s
"""
)

# Each queue's page is picked by id alone, then its rows read by id. Picking whole rows
# let the planner prefer walking jobs_id_idx backwards and filtering by queue and state
# (its estimate of the tenant check makes the state's index look dear): on a Citus shard of
# one or two queues whose newest jobs are not finished, the completed tab read 40,000 rows
# for 51 (85 ms against 10). The ids alone come from the state's index, which carries the
# tenant's column (migration 0042), without touching the table.
_LIST = (
    _COLUMNS
    + QUEUES
    + """
CROSS JOIN LATERAL (
    SELECT j.id FROM codity.jobs j
    WHERE j.queue_id = t.queue_id"""
    + JOB_MATCH
    + """
      AND (%(cursor)s::bigint IS NULL OR j.id < %(cursor)s::bigint)
    ORDER BY j.id DESC
    LIMIT %(fetch)s
) m
JOIN codity.jobs j ON j.queue_id = t.queue_id AND j.id = m.id
WHERE"""
    + QUEUE_MATCH
    + """
ORDER BY j.id DESC
LIMIT %(fetch)s
"""
)

_COUNT = (
    """
SELECT least(count(*), codity.count_cap()) AS count, count(*) > codity.count_cap() AS capped
FROM (
    SELECT 1"""
    + QUEUES
    + """
    CROSS JOIN LATERAL (
        SELECT 1 FROM codity.jobs j
        WHERE j.queue_id = t.queue_id"""
    + JOB_MATCH
    + """
        LIMIT codity.count_cap() + 1
    ) j
    WHERE"""
    + QUEUE_MATCH
    + """
    LIMIT codity.count_cap() + 1
) c
"""
)


_PARTS: tuple[tuple[str, ...], ...] = (
    *(statuses for statuses in TABS.values() if statuses),
    ("failed",),
)
"""The statuses each counted part holds: every tab but "all", and "failed", which no tab
shows (a failed job is rescheduled or dead-lettered in the same transaction). Together
they hold every status once, so "all" is their sum: no part reads a job twice, and no
read walks a queue's jobs whatever their status (which, with no index that covers the
tenant's column, reads the table)."""
assert sorted(s for part in _PARTS for s in part) == sorted(JOB_STATUSES)


def _part_lateral(i: int) -> str:
    """Part ``i``'s count in one queue (alias ``t``), stopping at ``%(share)s`` rows."""
    match = JOB_MATCH.replace("%(status)s", f"%(status_{i})s")
    return f"""
CROSS JOIN LATERAL (
    SELECT count(*) AS n FROM (
        SELECT 1 FROM codity.jobs j
        WHERE j.queue_id = t.queue_id{match}
        LIMIT %(share)s
    ) x
) c{i}"""


_PART_SHARES = (
    "SELECT "
    + ", ".join(
        f"sum(s.n{i}) AS total{i}, sum(CASE WHEN s.n{i} >= %(share)s THEN 1 ELSE 0 END) AS full{i}"
        for i in range(len(_PARTS))
    )
    + "\nFROM (\n    SELECT "
    + ", ".join(f"c{i}.n AS n{i}" for i in range(len(_PARTS)))
    + QUEUES
    + "".join(_part_lateral(i) for i in range(len(_PARTS)))
    + "\n    WHERE"
    + QUEUE_MATCH
    + ") s\n"
)
"""Every part's count in one statement, queue by queue, each queue's stopping at its share
of the cap (:func:`count_tabs`); per part, the sum and how many queues filled their share."""

_EXECUTIONS = """
SELECT x.fence AS execution_seq, x.attempt, x.status::text AS status, x.worker_id,
       x.claimed_at, x.started_at, x.finished_at, x.attempt_refunded, x.error, x.result
FROM codity.execution_overview x
WHERE x.project_id = %(project_id)s AND x.queue_id = %(queue_id)s AND x.job_id = %(job_id)s
ORDER BY x.fence
"""

_DEAD_LETTERS = """
SELECT d.id, d.reason, d.error, d.attempts, d.dead_at, d.replayed_at, d.replayed_job_id
FROM codity.dead_letters d
JOIN codity.queues q ON q.id = d.queue_id
WHERE q.project_id = %(project_id)s AND d.queue_id = %(queue_id)s AND d.job_id = %(job_id)s
ORDER BY d.dead_at, d.id
"""

_FENCE_REJECTIONS = """
SELECT f.id, f.call, f.worker_id, f.presented_fence, f.current_fence,
       f.job_status::text AS job_status, f.rejected_at
FROM codity.fence_rejections f
JOIN codity.queues q ON q.id = f.queue_id
WHERE q.project_id = %(project_id)s AND f.queue_id = %(queue_id)s AND f.job_id = %(job_id)s
ORDER BY f.rejected_at DESC, f.id DESC
LIMIT 100
"""


async def read_job(call: Call[Any, Any], job_id: int) -> dict[str, Any]:
    """One job of the guarded project with its payload, as the job routes answer it."""
    return await one_or_404(call, _ONE, {"project_id": call.project_id, "job_id": job_id}, "job")


async def count_matching(call: Call[Any, Any], params: dict[str, Any]) -> tuple[int, bool]:
    """How many jobs match (``params`` as :func:`match_params` gives), up to the cap."""
    cur = await call.conn.execute(match_query(_COUNT, params), params, prepare=False)
    found = await cur.fetchone()
    assert found is not None
    return int(found["count"]), bool(found["capped"])


# ---------------------------------------------------------------------------------------
# Handlers
# ---------------------------------------------------------------------------------------


async def list_jobs(call: Call[None, JobListQuery]) -> Reply:
    query = call.query
    params = match_params(query, call.project_id)
    cur = await call.conn.execute(
        match_query(_LIST, params),
        {**params, "cursor": decode_id_cursor(query.cursor), "fetch": query.limit + 1},
        prepare=False,
    )
    rows = [dict(r) for r in await cur.fetchall()]
    meta = page_meta(rows, query.limit)
    if query.count:
        count, capped = await count_matching(call, params)
        meta = {**meta, "count": count, "count_capped": capped}
    return Reply(rows, meta=meta)


async def count_tabs(call: Call[Any, Any], params: dict[str, Any]) -> list[tuple[int, bool]]:
    """Each tab's count (:data:`TABS`, in order) of the jobs ``params`` match, up to the cap:
    what :func:`count_matching` gives tab by tab, in one statement counted by shares
    (codity.web.endpoints.queue_walk), "all" as the sum of the parts (:data:`_PARTS`); a
    tab the shares do not settle is counted again."""
    cut = await shares(call, params)
    if cut.share is None:
        return [(0, False)] * len(TABS)
    statuses = {f"status_{i}": list(part) for i, part in enumerate(_PARTS)}
    by_shares = {**params, **statuses, "share": cut.share}
    cur = await call.conn.execute(match_query(_PART_SHARES, by_shares), by_shares, prepare=False)
    row = await cur.fetchone()
    assert row is not None
    parts = {part: (int(row[f"total{i}"] or 0), int(row[f"full{i}"] or 0))
             for i, part in enumerate(_PARTS)}  # fmt: skip
    counts = []
    for tab in TABS.values():
        if tab is None:  # "all": a lower bound past the cap, or exact when no part was cut
            total = sum(t for t, _ in parts.values())
            full = sum(f for _, f in parts.values())
        else:
            total, full = parts[tab]
        found = settled(total, full, cut.cap)
        if found is None:
            found = await count_matching(call, {**params, "status": list(tab) if tab else None})
        counts.append(found)
    return counts


async def count_jobs(call: Call[None, JobMatch]) -> list[dict[str, Any]]:
    params = match_params(call.query, call.project_id)
    counts = await count_tabs(call, params)
    return [
        {"state": state, "statuses": statuses, "count": count, "capped": capped}
        for (state, statuses), (count, capped) in zip(TABS.items(), counts, strict=True)
    ]


async def get_job(call: Call[None, None]) -> dict[str, Any]:
    job = await read_job(call, path_id(call, "job_id", "job"))
    keys = {"project_id": call.project_id, "queue_id": job["queue_id"], "job_id": job["id"]}
    job["executions"] = await fetch_all(call, _EXECUTIONS, keys)
    job["dead_letters"] = await fetch_all(call, _DEAD_LETTERS, keys)
    job["fence_rejections"] = await fetch_all(call, _FENCE_REJECTIONS, keys)
    job["timeline"] = job_timeline(job, job["executions"], job["dead_letters"])
    return job


def job_read_back(job_id: int, **reply: Any) -> ReadBack:
    """Answer with the job as it is once the write committed (``codity.web.endpoint.ReadBack``:
    on Citus, codity_app may not read the shard a definer function wrote in the same
    transaction); ``reply`` as :class:`Reply` takes it (status, meta)."""

    async def read(call: Call[Any, Any]) -> Reply:
        return Reply(await read_job(call, job_id), **reply)

    return ReadBack(read)


async def cancel_job(call: Call[None, None]) -> ReadBack:
    job_id = path_id(call, "job_id", "job")
    await fetch_all(call, "SELECT job_id FROM codity.cancel(%s, %s)", [job_id, call.project_id])
    log.info("job cancelled", extra={"job_id": job_id})
    return job_read_back(job_id)


async def retry_job(call: Call[None, None]) -> ReadBack:
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
    return job_read_back(rows[0]["job_id"], meta={"dead_letter_id": rows[0]["dead_letter_id"]})


_ONE_PATH = "/api/v1/jobs/{job_id:int}"

ROUTES = [
    Endpoint(
        "GET",
        "/api/v1/jobs",
        Scope.PROJECT,
        list_jobs,
        "List jobs, newest first, with filters, keyset pagination and a capped count",
        "jobs",
        min_role=Role.VIEWER,
        query=JobListQuery,
        response=JobSummary,
        many=True,
        errors=(422,),
    ),
    Endpoint(
        "GET",
        "/api/v1/jobs/counts",
        Scope.PROJECT,
        count_jobs,
        "Count the jobs matching a filter in each state (running = claimed + running), capped",
        "jobs",
        min_role=Role.VIEWER,
        query=JobMatch,
        response=StateCount,
        many=True,
        errors=(422,),
    ),
    Endpoint(
        "GET",
        _ONE_PATH,
        Scope.PROJECT,
        get_job,
        "Get a job with every execution, its dead letters, fence rejections and timeline",
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
