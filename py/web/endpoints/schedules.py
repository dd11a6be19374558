"""Schedules: cron definitions that enqueue a task on a timetable. Admins manage; members
run one now; viewers read.

Writes go through codity.create_schedule (an upsert on name), delete_schedule,
pause_schedule / resume_schedule and run_schedule_now with the guarded project; reads
select from the tables under row-level security and filter by project as well. Every
"no such schedule" -- missing, or another tenant's of the same name -- leaves as the same
``not_found("schedule")``, whether the handler or a SQL function (CD006) noticed it.

Every schedule read carries ``description``, the cron expression in plain words
("At 02:00, every day"; ``codity.web.cron_words``: never raises, the expression itself at
worst; the time zone is its own field), and the state of the job it last enqueued, so a page
shows "last run: job 123, completed". ``GET .../{name}/jobs`` lists the newest jobs a
schedule enqueued (the jobs list has no schedule filter).
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any

from psycopg.types.json import Jsonb
from pydantic import BaseModel, Field

from codity.web.access import Limit, Role, Scope
from codity.web.call import Call
from codity.web.cron_words import describe_cron
from codity.web.endpoint import Endpoint, Reply
from codity.web.endpoints.queues import PauseResult
from codity.web.errors import ApiError, not_found
from codity.web.fields import NUL_FREE, QueueName, Strict
from codity.web.lookups import one_or_404
from codity.web.paging import decode_text_cursor, encode_text_cursor, page_meta

__all__ = ["ROUTES"]

# Names live in the URL path, so no "/" (Starlette would never route it) and nothing that
# needs escaping; the database allows 1 to 200 characters of anything.
ScheduleName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$")]
Cron = Annotated[
    str, Field(min_length=1, max_length=200, pattern=NUL_FREE, examples=["*/15 * * * *"])
]
# IANA names (Europe/London, America/Argentina/Buenos_Aires, Etc/GMT+5, UTC).
TimeZone = Annotated[str, Field(pattern=r"^[A-Za-z0-9_+/-]{1,64}$", examples=["Europe/London"])]
Task = Annotated[str, Field(min_length=1, max_length=200, pattern=NUL_FREE)]
Priority = Annotated[int, Field(ge=-1000, le=1000)]


class ScheduleCreate(Strict):
    name: ScheduleName
    queue: QueueName
    cron: Cron
    time_zone: TimeZone = "UTC"
    task: Task
    payload: dict[str, Any] = Field(default_factory=dict)
    priority: Priority = 0


class ScheduleUpdate(Strict):
    """Fields to change; an omitted (or null) field keeps its current value. The name is the
    schedule's key and cannot change."""

    queue: QueueName | None = None
    cron: Cron | None = None
    time_zone: TimeZone | None = None
    task: Task | None = None
    payload: dict[str, Any] | None = None
    priority: Priority | None = None


class ListQuery(Strict):
    limit: int = Field(50, ge=1, le=200)
    cursor: str | None = Field(None, max_length=400)


class NextRunsQuery(Strict):
    count: int = Field(5, ge=1, le=100)


class Schedule(BaseModel):
    id: int
    name: str
    queue: str
    cron: str
    time_zone: str
    task: str
    payload: dict[str, Any]
    priority: int
    is_paused: bool
    next_run_at: dt.datetime
    last_run_at: dt.datetime | None
    last_job_id: int | None
    last_job_status: str | None
    """The state of that job now (None: never run, or the job was deleted)."""
    description: str
    """The cron expression in plain words, in the schedule's time zone: "At 02:00, every day"."""
    created_at: dt.datetime
    updated_at: dt.datetime


class RunNowResult(BaseModel):
    job_id: int
    schedule: str


class RecentJobsQuery(Strict):
    limit: int = Field(10, ge=1, le=100)


class ScheduleJob(BaseModel):
    id: int
    queue: str
    task: str
    status: str
    run_at: dt.datetime
    attempt: int
    created_at: dt.datetime
    finished_at: dt.datetime | None


class NextRun(BaseModel):
    run_at: dt.datetime
    local_time: dt.datetime
    """Wall-clock time in the schedule's zone (no offset), e.g. to spot a DST shift."""


class NextRuns(BaseModel):
    name: str
    cron: str
    time_zone: str
    runs: list[NextRun]


_DEFINITIONS = """
SELECT s.id, s.name, q.name AS queue, s.cron, s.time_zone, s.task, s.payload, s.priority,
       s.is_paused, s.next_run_at, s.last_run_at, s.last_job_id, s.queue_id,
       s.created_at, s.updated_at
FROM codity.scheduled_jobs s
JOIN codity.queues q ON q.id = s.queue_id AND q.project_id = s.project_id
WHERE s.project_id = %(project_id)s
  AND (%(name)s::text IS NULL OR s.name = %(name)s::text)
  AND (%(after)s::text IS NULL OR s.name > %(after)s::text)
ORDER BY s.name
LIMIT %(limit)s
"""
"""A page of the project's schedules in name order (or the one named): their definitions."""

_SCHEDULES = (
    """
WITH s AS MATERIALIZED ("""
    + _DEFINITIONS
    + """), last_jobs AS MATERIALIZED (
    SELECT j.id, j.status FROM codity.jobs j
    JOIN s ON j.queue_id = s.queue_id AND j.id = s.last_job_id
)
SELECT s.id, s.name, s.queue, s.cron, s.time_zone, s.task, s.payload, s.priority, s.is_paused,
       s.next_run_at, s.last_run_at, s.last_job_id, l.status::text AS last_job_status,
       s.created_at, s.updated_at
FROM s
LEFT JOIN last_jobs l ON l.id = s.last_job_id
ORDER BY s.name
"""
)
""":data:`_DEFINITIONS`, each with the state of the job it last enqueued. The schedules are
read first and the jobs joined to them after (two fenced CTEs, each job found by its queue
and id): on a Citus cluster the schedules are a reference table and the jobs are
distributed, and Citus cannot plan a reference table outer-joined to the jobs ("failed to
postpone qual containing lateral reference"); on one server it is the same probe of the
jobs' primary key per schedule."""


def _schedule_params(
    project_id: int, *, name: str | None = None, after: str | None = None, limit: int = 1
) -> dict[str, Any]:
    return {"project_id": project_id, "name": name, "after": after, "limit": limit}


def _described(row: dict[str, Any]) -> dict[str, Any]:
    return {**row, "description": describe_cron(row["cron"])}


def _path_name(call: Call[Any, Any]) -> str:
    """The schedule named in the path; a name no schedule can have is simply not found."""
    name = str(call.path["name"])
    if not 1 <= len(name) <= 200 or "\x00" in name:
        raise not_found("schedule")
    return name


async def _execute(
    call: Call[Any, Any], query: str, params: dict[str, Any]
) -> list[dict[str, Any]]:
    """Run one codity.* function call (its errors are the mount's shared translation; a bad
    cron expression or time zone answers 422 naming the field)."""
    cur = await call.conn.execute(query, params)
    return [dict(r) for r in await cur.fetchall()]


async def _one(call: Call[Any, Any], name: str, query: str = _SCHEDULES) -> dict[str, Any]:
    params = _schedule_params(call.project_id, name=name)
    return _described(await one_or_404(call, query, params, "schedule"))


async def list_schedules(call: Call[None, ListQuery]) -> Reply:
    """Ordered by name, a page at a time (keyset on the name, so pages never overlap)."""
    after = decode_text_cursor(call.query.cursor)
    cur = await call.conn.execute(
        _SCHEDULES,
        _schedule_params(call.project_id, after=after, limit=call.query.limit + 1),
    )
    rows = [_described(dict(r)) for r in await cur.fetchall()]
    meta = page_meta(rows, call.query.limit, key="name", encode=encode_text_cursor)
    return Reply(rows, meta=meta)


async def get_schedule(call: Call[None, None]) -> dict[str, Any]:
    return await _one(call, _path_name(call))


_UPSERT = """
SELECT schedule_id, created FROM codity.create_schedule(
    p_name => %(name)s, p_queue => %(queue)s, p_cron => %(cron)s, p_task => %(task)s,
    p_payload => %(payload)s, p_time_zone => %(time_zone)s, p_priority => %(priority)s,
    p_project_id => %(project_id)s)
"""


def _upsert_params(call: Call[Any, Any], values: dict[str, Any]) -> dict[str, Any]:
    return {
        **values,
        "payload": Jsonb(values["payload"]),
        "project_id": call.project_id,
    }


async def create_schedule(call: Call[ScheduleCreate, None]) -> dict[str, Any]:
    """create_schedule is an upsert; when it reports an update instead of an insert the
    name was taken, and raising rolls that update back. No check-then-insert race."""
    rows = await _execute(call, _UPSERT, _upsert_params(call, call.body.model_dump()))
    if not rows or not rows[0]["created"]:
        raise ApiError(409, "conflict", f"schedule {call.body.name!r} already exists")
    return await _one(call, call.body.name)


async def update_schedule(call: Call[ScheduleUpdate, None]) -> dict[str, Any]:
    """Merge the changes into the current definition and upsert it. create_schedule keeps
    next_run_at when cron and time zone are unchanged and recomputes it from now when
    either changes; the pause flag is left alone."""
    # The definition only: on Citus, reading the jobs (a parallel read of their shards)
    # before create_schedule writes the schedules (a reference table) in the same
    # transaction is refused, and the merge needs no job.
    current = await _one(call, _path_name(call), _DEFINITIONS)
    changes = call.body.model_dump(exclude_none=True)
    if not changes:
        return await _one(call, current["name"])
    merged = {
        **{k: current[k] for k in ("name", "queue", "cron", "time_zone", "task", "payload")},
        "priority": current["priority"],
        **changes,
    }
    rows = await _execute(call, _UPSERT, _upsert_params(call, merged))
    if not rows or rows[0]["created"]:
        # Deleted since we read it: an update must not bring it back (raising rolls back).
        raise not_found("schedule")
    return await _one(call, current["name"])


async def delete_schedule(call: Call[None, None]) -> None:
    await _execute(
        call,
        "SELECT codity.delete_schedule(%(name)s, %(project_id)s)",
        {"name": _path_name(call), "project_id": call.project_id},
    )


async def _pause(call: Call[Any, Any], query: str, paused: bool) -> dict[str, Any]:
    name = _path_name(call)
    rows = await _execute(call, query, {"name": name, "project_id": call.project_id})
    return {"name": name, "is_paused": paused, "changed": bool(rows and rows[0]["changed"])}


async def pause_schedule(call: Call[None, None]) -> dict[str, Any]:
    return await _pause(
        call, "SELECT codity.pause_schedule(%(name)s, %(project_id)s) AS changed", True
    )


async def resume_schedule(call: Call[None, None]) -> dict[str, Any]:
    return await _pause(
        call, "SELECT codity.resume_schedule(%(name)s, %(project_id)s) AS changed", False
    )


async def run_schedule_now(call: Call[None, None]) -> dict[str, Any]:
    name = _path_name(call)
    rows = await _execute(
        call,
        "SELECT codity.run_schedule_now(%(name)s, %(project_id)s) AS job_id",
        {"name": name, "project_id": call.project_id},
    )
    return {"job_id": rows[0]["job_id"], "schedule": name}


async def next_runs(call: Call[None, NextRunsQuery]) -> dict[str, Any]:
    schedule = await _one(call, _path_name(call))
    runs = await _execute(
        call,
        "SELECT run_at, local_time FROM codity.schedule_next_runs("
        "%(name)s, %(count)s, %(project_id)s)",
        {"name": schedule["name"], "count": call.query.count, "project_id": call.project_id},
    )
    return {
        "name": schedule["name"],
        "cron": schedule["cron"],
        "time_zone": schedule["time_zone"],
        "runs": runs,
    }


# Newest first by id through the schedule's jobs (jobs_schedule_idx); both joins keep the
# project explicit on top of row-level security.
_RECENT_JOBS = """
SELECT j.id, q.name AS queue, j.task, j.status::text AS status, j.run_at, j.attempt,
       j.created_at, j.finished_at
FROM codity.jobs j
JOIN codity.queues q ON q.id = j.queue_id AND q.project_id = %(project_id)s
WHERE j.schedule_id = %(schedule_id)s
ORDER BY j.id DESC
LIMIT %(limit)s
"""


async def recent_jobs(call: Call[None, RecentJobsQuery]) -> list[dict[str, Any]]:
    """The newest jobs the schedule enqueued (on its timetable or run now); a job deleted
    since is simply not there."""
    schedule = await _one(call, _path_name(call))
    return await _execute(
        call,
        _RECENT_JOBS,
        {"schedule_id": schedule["id"], "project_id": call.project_id, "limit": call.query.limit},
    )


_ALL = "/api/v1/schedules"
_ONE = _ALL + "/{name}"
_TAG = "schedules"

ROUTES = [
    Endpoint(
        "GET",
        _ALL,
        Scope.PROJECT,
        list_schedules,
        "List schedules",
        _TAG,
        min_role=Role.VIEWER,
        query=ListQuery,
        response=Schedule,
        many=True,
        errors=(422,),
    ),
    Endpoint(
        "POST",
        _ALL,
        Scope.PROJECT,
        create_schedule,
        "Create a cron schedule",
        _TAG,
        min_role=Role.ADMIN,
        body=ScheduleCreate,
        response=Schedule,
        status=201,
        errors=(404, 409, 422),
        example={
            "name": "nightly-digest",
            "queue": "emails",
            "cron": "0 2 * * *",
            "time_zone": "Europe/London",
            "task": "emails.digest",
            "payload": {"list": "subscribers"},
        },
    ),
    Endpoint(
        "GET",
        _ONE,
        Scope.PROJECT,
        get_schedule,
        "Get a schedule",
        _TAG,
        min_role=Role.VIEWER,
        response=Schedule,
        errors=(404,),
    ),
    Endpoint(
        "PATCH",
        _ONE,
        Scope.PROJECT,
        update_schedule,
        "Change a schedule (a new cron or time zone recomputes the next run from now)",
        _TAG,
        min_role=Role.ADMIN,
        body=ScheduleUpdate,
        response=Schedule,
        errors=(404, 422),
        example={"cron": "30 2 * * *"},
    ),
    Endpoint(
        "DELETE",
        _ONE,
        Scope.PROJECT,
        delete_schedule,
        "Delete a schedule (the jobs it created stay)",
        _TAG,
        min_role=Role.ADMIN,
        status=204,
        errors=(404,),
    ),
    Endpoint(
        "POST",
        _ONE + "/pause",
        Scope.PROJECT,
        pause_schedule,
        "Pause a schedule",
        _TAG,
        min_role=Role.ADMIN,
        response=PauseResult,
        errors=(404,),
    ),
    Endpoint(
        "POST",
        _ONE + "/resume",
        Scope.PROJECT,
        resume_schedule,
        "Resume a schedule from its next occurrence after now",
        _TAG,
        min_role=Role.ADMIN,
        response=PauseResult,
        errors=(404,),
    ),
    Endpoint(
        "POST",
        _ONE + "/run",
        Scope.PROJECT,
        run_schedule_now,
        "Enqueue one job from a schedule now (its timetable is unchanged)",
        _TAG,
        min_role=Role.MEMBER,
        response=RunNowResult,
        status=201,
        limit=Limit.ENQUEUE,
        errors=(404, 429),
    ),
    Endpoint(
        "GET",
        _ONE + "/next-runs",
        Scope.PROJECT,
        next_runs,
        "The next runs of a schedule, daylight-saving changes included",
        _TAG,
        min_role=Role.VIEWER,
        query=NextRunsQuery,
        response=NextRuns,
        errors=(404, 422),
    ),
    Endpoint(
        "GET",
        _ONE + "/jobs",
        Scope.PROJECT,
        recent_jobs,
        "The newest jobs a schedule enqueued",
        _TAG,
        min_role=Role.VIEWER,
        query=RecentJobsQuery,
        response=ScheduleJob,
        many=True,
        errors=(404, 422),
    ),
]
