"""Dead letters: list, look at one, replay one, replay all that match a filter.

Replays go through codity.replay_dead_letter and codity.replay_dead_letters with the
guarded project (the latter locks FOR UPDATE SKIP LOCKED, so two replay-alls at once never
replay one letter twice). Reads select from the tables, filtered by project explicitly
on top of row-level security. A letter of another project reads exactly as a missing one.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from pydantic import AwareDatetime, BaseModel, Field

from codity.web.access import Role, Scope
from codity.web.call import Call
from codity.web.endpoint import Endpoint, Reply
from codity.web.fields import BoundedText, QueueName, Strict
from codity.web.lookups import fetch_all, one_or_404, path_id
from codity.web.paging import newest_first

__all__ = ["ROUTES"]

log = logging.getLogger(__name__)


class DeadLetterQuery(Strict):
    queue: QueueName | None = None
    task: BoundedText | None = None
    dead_after: AwareDatetime | None = None
    dead_before: AwareDatetime | None = None
    replayed: bool | None = None
    limit: int = Field(50, ge=1, le=200)
    cursor: str | None = Field(None, max_length=64)


class ReplayAll(Strict):
    queue: QueueName | None = None
    task: BoundedText | None = None
    dead_before: AwareDatetime | None = None
    limit: int = Field(100, ge=1, le=1000)


class DeadLetterSummary(BaseModel):
    id: int
    job_id: int | None
    queue: str
    task: str
    priority: int
    reason: str
    error: str | None
    attempts: int
    dead_at: dt.datetime
    replayed_at: dt.datetime | None
    replayed_job_id: int | None


class DeadLetter(DeadLetterSummary):
    payload: dict[str, Any]


class Replayed(BaseModel):
    dead_letter_id: int
    job_id: int
    status: str


class ReplayedAll(BaseModel):
    count: int
    job_ids: list[int]
    dead_letter_ids: list[int]


_COLUMNS = """
SELECT d.id, d.job_id, q.name AS queue, d.task, d.priority, d.reason, d.error, d.attempts,
       d.dead_at, d.replayed_at, d.replayed_job_id
"""

_LIST = (
    _COLUMNS
    + """
FROM codity.dead_letters d
JOIN codity.queues q ON q.id = d.queue_id
WHERE q.project_id = %(project_id)s
  AND (%(queue)s::text IS NULL OR q.name = %(queue)s::text)
  AND (%(task)s::text IS NULL OR d.task = %(task)s::text)
  AND (%(dead_after)s::timestamptz IS NULL OR d.dead_at > %(dead_after)s::timestamptz)
  AND (%(dead_before)s::timestamptz IS NULL OR d.dead_at < %(dead_before)s::timestamptz)
  AND (%(replayed)s::boolean IS NULL OR (d.replayed_at IS NOT NULL) = %(replayed)s::boolean)
  AND (%(cursor)s::bigint IS NULL OR d.id < %(cursor)s::bigint)
ORDER BY d.id DESC
LIMIT %(fetch)s
"""
)

_ONE = (
    _COLUMNS
    + """, d.payload
FROM codity.dead_letters d
JOIN codity.queues q ON q.id = d.queue_id
WHERE q.project_id = %(project_id)s AND d.id = %(id)s
"""
)


async def list_dead_letters(call: Call[None, DeadLetterQuery]) -> Reply:
    return await newest_first(call, _LIST, call.query)


async def get_dead_letter(call: Call[None, None]) -> dict[str, Any]:
    letter_id = path_id(call, "dead_letter_id", "dead letter")
    return await one_or_404(
        call, _ONE, {"project_id": call.project_id, "id": letter_id}, "dead letter"
    )


async def replay_dead_letter(call: Call[None, None]) -> dict[str, Any]:
    letter_id = path_id(call, "dead_letter_id", "dead letter")
    rows = await fetch_all(
        call,
        "SELECT job_id, job_status::text AS status FROM codity.replay_dead_letter(%s, %s)",
        [letter_id, call.project_id],
    )
    log.info(
        "dead letter replayed",
        extra={
            "dead_letter_id": letter_id,
            "job_id": rows[0]["job_id"],
        },
    )
    return {"dead_letter_id": letter_id, **rows[0]}


async def replay_all(call: Call[ReplayAll, None]) -> dict[str, Any]:
    body = call.body
    rows = await fetch_all(
        call,
        "SELECT dead_letter_id, job_id FROM codity.replay_dead_letters(%s, %s, %s, %s, %s)",
        [call.project_id, body.queue, body.task, body.dead_before, body.limit],
    )
    log.info(
        "dead letters replayed",
        extra={"queue": body.queue, "count": len(rows)},
    )
    return {
        "count": len(rows),
        "job_ids": [r["job_id"] for r in rows],
        "dead_letter_ids": [r["dead_letter_id"] for r in rows],
    }


_ONE_PATH = "/api/v1/dead-letters/{dead_letter_id:int}"

ROUTES = [
    Endpoint(
        "GET",
        "/api/v1/dead-letters",
        Scope.PROJECT,
        list_dead_letters,
        "List dead letters, newest first, with filters and keyset pagination",
        "dead-letters",
        min_role=Role.VIEWER,
        query=DeadLetterQuery,
        response=DeadLetterSummary,
        many=True,
        errors=(422,),
    ),
    Endpoint(
        "GET",
        _ONE_PATH,
        Scope.PROJECT,
        get_dead_letter,
        "Get a dead letter with its payload",
        "dead-letters",
        min_role=Role.VIEWER,
        response=DeadLetter,
        errors=(404,),
    ),
    Endpoint(
        "POST",
        _ONE_PATH + "/replay",
        Scope.PROJECT,
        replay_dead_letter,
        "Replay one dead letter into its queue with fresh attempts",
        "dead-letters",
        min_role=Role.MEMBER,
        response=Replayed,
        errors=(404, 409),
    ),
    Endpoint(
        "POST",
        "/api/v1/dead-letters/replay",
        Scope.PROJECT,
        replay_all,
        "Replay every unreplayed dead letter matching a filter (at most limit)",
        "dead-letters",
        min_role=Role.ADMIN,
        body=ReplayAll,
        response=ReplayedAll,
        errors=(404,),
        example={"queue": "emails", "limit": 500},
    ),
]
