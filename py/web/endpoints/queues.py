"""Queues: create, read, update, delete, pause, resume, stats, history. Admins manage;
viewers read.

Writes go through codity.create_queue / delete_queue / pause_queue / resume_queue with the
guarded project; reads select from the tables, under row-level security. Counts come from
codity.queue_depths, capped at codity.count_cap(), never from counting every job row;
history comes from the per-minute rollup (codity.queue_minutes).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, Field

from codity.web.access import Role, Scope
from codity.web.call import Call
from codity.web.endpoint import Endpoint
from codity.web.errors import ApiError
from codity.web.fields import QueueName, Strict
from codity.web.lookups import one_or_404

__all__ = ["COUNTED", "DEPTHS", "ROUTES", "PauseResult", "capped_states"]


class QueuePolicy(Strict):
    max_attempts: int = Field(3, ge=1, le=1000)
    backoff: Literal["fixed", "linear", "exponential"] = "exponential"
    base_delay_ms: int = Field(1000, ge=0, le=2**31 - 1)
    max_delay_ms: int = Field(3_600_000, ge=0, le=2**31 - 1)
    lease_seconds: int = Field(30, ge=1, le=86400)
    max_crashes: int = Field(5, ge=1, le=1000)
    job_timeout_seconds: int | None = Field(None, ge=1, le=2**31 - 1)
    keep_completed_seconds: int | None = Field(
        604_800,
        ge=60,
        le=315_360_000,
        description="How long completed and cancelled jobs and their executions are kept"
        " after they finish (7 days); null keeps them forever.",
    )
    keep_dead_letters_seconds: int | None = Field(
        2_592_000,
        ge=60,
        le=315_360_000,
        description="How long dead-lettered jobs and their dead letters are kept (30 days);"
        " null keeps them forever.",
    )
    max_running: int | None = Field(
        None,
        ge=1,
        le=100_000,
        description="At most this many jobs claimed or running at once across all workers;"
        " null: no limit.",
    )
    rate_limit: int | None = Field(
        None,
        ge=1,
        le=1_000_000,
        description="At most this many claims per rate_period_seconds; null: no limit.",
    )
    rate_period_seconds: int | None = Field(
        None, ge=1, le=86_400, description="The rate limit's window (1 s when not given)."
    )
    weight: int = Field(
        1,
        ge=1,
        le=1000,
        description="The queue's share of a worker's room beside the other queues it serves"
        " that have work, in proportion to their weights (1).",
    )


class QueueCreate(QueuePolicy):
    name: QueueName


class QueueUpdate(Strict):
    max_attempts: int | None = Field(None, ge=1, le=1000)
    backoff: Literal["fixed", "linear", "exponential"] | None = None
    base_delay_ms: int | None = Field(None, ge=0, le=2**31 - 1)
    max_delay_ms: int | None = Field(None, ge=0, le=2**31 - 1)
    lease_seconds: int | None = Field(None, ge=1, le=86400)
    max_crashes: int | None = Field(None, ge=1, le=1000)
    job_timeout_seconds: int | None = Field(None, ge=1, le=2**31 - 1)
    keep_completed_seconds: int | None = Field(None, ge=60, le=315_360_000)
    keep_dead_letters_seconds: int | None = Field(None, ge=60, le=315_360_000)
    max_running: int | None = Field(None, ge=1, le=100_000)
    rate_limit: int | None = Field(None, ge=1, le=1_000_000)
    rate_period_seconds: int | None = Field(None, ge=1, le=86_400)
    weight: int | None = Field(None, ge=1, le=1000)


class DeleteQuery(Strict):
    force: bool = False


class Queue(BaseModel):
    id: int
    name: str
    max_attempts: int
    backoff: str
    base_delay_ms: int
    max_delay_ms: int
    lease_seconds: int
    max_crashes: int
    job_timeout_seconds: int | None
    keep_completed_seconds: int | None
    keep_dead_letters_seconds: int | None
    max_running: int | None
    rate_limit: int | None
    rate_period_seconds: int | None
    weight: int
    is_paused: bool
    paused_at: dt.datetime | None
    created_at: dt.datetime
    updated_at: dt.datetime


class QueueStats(BaseModel):
    name: str
    is_paused: bool
    claimable: int
    scheduled: int
    running: int
    completed: int
    failed: int
    dead_letter: int
    cancelled: int
    oldest_claimable_age_seconds: float | None
    capped: list[str]
    """The states whose count reached ``count_cap``: read those as "at least"."""
    count_cap: int


class PauseResult(BaseModel):
    name: str
    is_paused: bool
    changed: bool


_SELECT = """
SELECT id, name, max_attempts, backoff::text AS backoff, base_delay_ms, max_delay_ms,
       lease_seconds, max_crashes, job_timeout_seconds, keep_completed_seconds,
       keep_dead_letters_seconds, max_running, rate_limit, rate_period_seconds, weight,
       is_paused, paused_at, created_at, updated_at
FROM codity.queues
"""


async def _one(call: Call[Any, Any], name: str) -> dict[str, Any]:
    query = _SELECT + " WHERE project_id = %s AND name = %s"
    return await one_or_404(call, query, [call.project_id, name], "queue")


async def list_queues(call: Call[None, None]) -> list[dict[str, Any]]:
    cur = await call.conn.execute(
        _SELECT + " WHERE project_id = %s ORDER BY name", [call.project_id]
    )
    return [dict(r) for r in await cur.fetchall()]


async def get_queue(call: Call[None, None]) -> dict[str, Any]:
    return await _one(call, call.path["name"])


_CREATE = """
SELECT queue_id, created FROM codity.create_queue(
    %(name)s, %(project_id)s, %(max_attempts)s, %(backoff)s, %(base_delay_ms)s,
    %(max_delay_ms)s, %(lease_seconds)s, %(max_crashes)s, %(job_timeout_seconds)s,
    %(keep_completed_seconds)s, %(keep_dead_letters_seconds)s, %(max_running)s,
    %(rate_limit)s, %(rate_period_seconds)s, %(weight)s)
"""
_ZERO_IS_NONE = ("keep_completed_seconds", "keep_dead_letters_seconds", "max_running",
                 "rate_limit")  # fmt: skip


def _create_args(values: Mapping[str, Any], name: str, project_id: int) -> dict[str, Any]:
    """The arguments of codity.create_queue for a queue that is to hold ``values``: a
    period of None (keep forever) or a limit of None (none) is passed as 0, since NULL
    would keep the current one."""
    args = {**values, "name": name, "project_id": project_id}
    for key in _ZERO_IS_NONE:
        if args[key] is None:
            args[key] = 0
    return args


async def create_queue(call: Call[QueueCreate, None]) -> dict[str, Any]:
    cur = await call.conn.execute(
        "SELECT 1 FROM codity.queues WHERE project_id = %s AND name = %s",
        [call.project_id, call.body.name],
    )
    if await cur.fetchone() is not None:
        raise ApiError(409, "conflict", f"queue {call.body.name!r} already exists")
    await call.conn.execute(
        _CREATE, _create_args(call.body.model_dump(), call.body.name, call.project_id)
    )
    return await _one(call, call.body.name)


async def update_queue(call: Call[QueueUpdate, None]) -> dict[str, Any]:
    current = await _one(call, call.path["name"])
    changes = call.body.model_dump(exclude_unset=True)
    if "job_timeout_seconds" in changes and changes["job_timeout_seconds"] is None:
        changes["job_timeout_seconds"] = 0  # create_queue: 0 removes the timeout, NULL keeps it
    merged = {**{k: current[k] for k in QueuePolicy.model_fields}, **changes}
    await call.conn.execute(_CREATE, _create_args(merged, current["name"], call.project_id))
    return await _one(call, current["name"])


async def delete_queue(call: Call[None, DeleteQuery]) -> None:
    await call.conn.execute(
        "SELECT codity.delete_queue(%s, %s, %s)",
        [call.path["name"], call.project_id, call.query.force],
    )


async def _pause(call: Call[Any, Any], function: str, paused: bool) -> dict[str, Any]:
    name = call.path["name"]
    cur = await call.conn.execute(
        f"SELECT codity.{function}(%s, %s) AS changed", [name, call.project_id]
    )
    row = await cur.fetchone()
    return {"name": name, "is_paused": paused, "changed": bool(row and row["changed"])}


async def pause_queue(call: Call[None, None]) -> dict[str, Any]:
    return await _pause(call, "pause_queue", True)


async def resume_queue(call: Call[None, None]) -> dict[str, Any]:
    return await _pause(call, "resume_queue", False)


COUNTED = ("claimable", "scheduled", "running", "completed", "failed", "dead_letter", "cancelled")
"""The states an operator acts on, in the order pages show them: claimable (queued and due),
scheduled (or queued for later), running (claimed or running), then the terminal ones."""

DEPTHS = """
SELECT d.queue_id, d.queue, d.is_paused, d.claimable, d.scheduled, d.running, d.completed,
       d.failed, d.dead_letter, d.cancelled,
       extract(epoch FROM now() - d.oldest_claimable_at)::float8 AS oldest_claimable_seconds,
       codity.count_cap() AS count_cap
FROM codity.queue_depths(%(project_id)s, p_queue => %(queue)s::text) d
"""
"""Each queue of the project (or the one named by ``queue``; None: all) with its counts
per state, each capped at ``codity.count_cap()`` (see sql/functions/queue_depths.sql: one
index range per state that stops at the cap, so a million jobs cost what ten thousand do).
The overview reads the same rows, so its numbers match the stats."""


def capped_states(row: Mapping[str, Any]) -> list[str]:
    """The states of a ``DEPTHS`` row whose count reached the cap: "at least that many"."""
    return [state for state in COUNTED if row[state] >= row["count_cap"]]


async def queue_stats(call: Call[None, None]) -> dict[str, Any]:
    params = {"project_id": call.project_id, "queue": call.path["name"]}
    row = await one_or_404(call, DEPTHS, params, "queue")
    return {
        **row,
        "name": row["queue"],
        "oldest_claimable_age_seconds": row["oldest_claimable_seconds"],
        "capped": capped_states(row),
    }


class HistoryQuery(Strict):
    minutes: int = Field(60, ge=5, le=1440)


class MinutePoint(BaseModel):
    minute: dt.datetime
    completed: int
    failed: int
    dead_lettered: int
    claimable: int
    scheduled: int
    running: int
    rolled: bool
    """False: the minute is not rolled up yet (at or after ``rolled_until``); its zeros
    mean "not counted yet", not "nothing happened"."""


class QueueHistory(BaseModel):
    name: str
    minutes: int
    rolled_until: dt.datetime | None
    count_cap: int
    points: list[MinutePoint]


_HISTORY_QUEUE = """
SELECT q.id, q.name, s.rolled_until, codity.count_cap() AS count_cap
FROM codity.queues q CROSS JOIN codity.rollup_state s
WHERE q.project_id = %(project_id)s AND q.name = %(name)s
"""

_HISTORY = """
SELECT g.minute,
       coalesce(m.completed, 0) AS completed, coalesce(m.failed, 0) AS failed,
       coalesce(m.dead_lettered, 0) AS dead_lettered, coalesce(m.claimable, 0) AS claimable,
       coalesce(m.scheduled, 0) AS scheduled, coalesce(m.running, 0) AS running,
       coalesce(g.minute < %(rolled_until)s, false) AS rolled
FROM pg_catalog.generate_series(
         date_trunc('minute', now()) - pg_catalog.make_interval(mins => %(minutes)s),
         date_trunc('minute', now()) - interval '1 minute',
         interval '1 minute') AS g (minute)
LEFT JOIN codity.queue_minutes m ON m.queue_id = %(queue_id)s AND m.minute = g.minute
ORDER BY g.minute
"""


async def queue_history(call: Call[None, HistoryQuery]) -> dict[str, Any]:
    """The queue's last ``minutes`` closed minutes, oldest first, one point each, from the
    rollup (codity.queue_minutes): executions completed and failed and jobs dead-lettered in
    the minute, and the depth sampled when it was rolled up. A minute without a row had
    nothing to count (roll_up writes only what is not zero); a minute at or after
    ``rolled_until`` is not rolled up yet and says so (``rolled``: false)."""
    params = {"project_id": call.project_id, "name": call.path["name"]}
    queue = await one_or_404(call, _HISTORY_QUEUE, params, "queue")
    minutes = call.query.minutes
    cur = await call.conn.execute(
        _HISTORY,
        {"queue_id": queue["id"], "minutes": minutes, "rolled_until": queue["rolled_until"]},
    )
    points = [dict(r) for r in await cur.fetchall()]
    return {**queue, "minutes": minutes, "points": points}


_ONE = "/api/v1/queues/{name}"

ROUTES = [
    Endpoint(
        "GET",
        "/api/v1/queues",
        Scope.PROJECT,
        list_queues,
        "List queues",
        "queues",
        min_role=Role.VIEWER,
        response=Queue,
        many=True,
    ),
    Endpoint(
        "POST",
        "/api/v1/queues",
        Scope.PROJECT,
        create_queue,
        "Create a queue",
        "queues",
        min_role=Role.ADMIN,
        body=QueueCreate,
        response=Queue,
        status=201,
        errors=(409,),
        example={"name": "reports", "max_attempts": 5, "backoff": "exponential"},
    ),
    Endpoint(
        "GET",
        _ONE,
        Scope.PROJECT,
        get_queue,
        "Get a queue",
        "queues",
        min_role=Role.VIEWER,
        response=Queue,
        errors=(404,),
    ),
    Endpoint(
        "PATCH",
        _ONE,
        Scope.PROJECT,
        update_queue,
        "Change a queue's retry policy",
        "queues",
        min_role=Role.ADMIN,
        body=QueueUpdate,
        response=Queue,
        errors=(404,),
        example={"max_attempts": 8},
    ),
    Endpoint(
        "DELETE",
        _ONE,
        Scope.PROJECT,
        delete_queue,
        "Delete a queue and its jobs",
        "queues",
        min_role=Role.ADMIN,
        query=DeleteQuery,
        status=204,
        errors=(404, 409),
    ),
    Endpoint(
        "POST",
        _ONE + "/pause",
        Scope.PROJECT,
        pause_queue,
        "Pause a queue",
        "queues",
        min_role=Role.ADMIN,
        response=PauseResult,
        errors=(404,),
    ),
    Endpoint(
        "POST",
        _ONE + "/resume",
        Scope.PROJECT,
        resume_queue,
        "Resume a queue",
        "queues",
        min_role=Role.ADMIN,
        response=PauseResult,
        errors=(404,),
    ),
    Endpoint(
        "GET",
        _ONE + "/stats",
        Scope.PROJECT,
        queue_stats,
        "A queue's job counts per state, each capped at count_cap",
        "queues",
        min_role=Role.VIEWER,
        response=QueueStats,
        errors=(404,),
    ),
    Endpoint(
        "GET",
        _ONE + "/history",
        Scope.PROJECT,
        queue_history,
        "A queue's per-minute throughput and depth over the last minutes (5 to 1440)",
        "queues",
        min_role=Role.VIEWER,
        query=HistoryQuery,
        response=QueueHistory,
        errors=(404, 422),
    ),
]
