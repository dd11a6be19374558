"""Bulk actions on jobs: cancel or retry the selected ones, or every job matching a filter.

One route, ``POST /api/v1/jobs/bulk``, with one of two scopes:

- ``ids`` (at most 1000, role member): exactly those jobs. An id of another project, or
  of no job, is skipped like a job whose state the action does not apply to, so the
  answer says nothing about other tenants.
- ``filter`` (the fields of ``GET /api/v1/jobs``, role admin, since one request can touch
  every job of the project): every matching job created at or before ``as_of``, in a state
  the action applies to (cancel: scheduled, queued, claimed, running; retry:
  dead_letter). A dry run answers the exact count and ``as_of``, the database time it
  counted at; the confirmed run passes it back, so a job enqueued after the operator read
  the number is never swept in. A run without ``as_of`` bounds itself the same way when it
  starts (and a given one later than the server's clock counts as now).

Why a time and not the highest id shown: ids carry no global order (DESIGN.md, rule 5).
On a Citus cluster a job enqueued on a worker node draws its id from that node's range,
so a job enqueued after the dry run may have a lower id than every job the operator saw,
and "id up to" would sweep it in. ``up_to_id`` (the highest id in scope) is still
answered, and still honoured when a client passes it, for the clients written before
``as_of``; on a cluster only ``as_of`` bounds the scope to what the operator saw. A job
whose enqueueing transaction began before ``as_of`` and committed after it has an earlier
``created_at`` and falls inside: it matched the filter and is as old as the others.

The work goes through codity.cancel_jobs / codity.retry_jobs, :data:`BATCH` ids per call,
each call in a transaction of its own that also picks its ids (a keyset walk down the ids
from the highest in scope: any order walks a set once, and the scope is bounded by time).
Short transactions because a bulk action may cover 100,000 jobs: each holds at most
:data:`BATCH` row locks for milliseconds, so workers claiming and completing in the same
queues wait for no more than that; what is done stays done if the client goes away or a
later batch fails; and no transaction stays open long enough to hold back vacuum. The
price is that the whole is not atomic: a job that changes state between the dry run and
its batch is skipped (the SQL functions judge each job on its locked row), and the answer
counts it as such.

Payload values (a filter may hold some) are never logged; counts are.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any, Literal, Self

from pydantic import AwareDatetime, BaseModel, Field, model_validator

from codity.web.access import Role, Scope
from codity.web.bulk_slots import bulk_slot
from codity.web.call import Call
from codity.web.database import set_tenant, transaction
from codity.web.endpoint import Endpoint
from codity.web.endpoints.jobs import JOB_MATCH, JobFilter, JobId, match_params, match_query
from codity.web.endpoints.queue_walk import QUEUE_MATCH, QUEUES
from codity.web.errors import ApiError
from codity.web.fields import Strict

__all__ = ["APPLIES_TO", "BATCH", "MAX_IDS", "ROUTES", "BulkAction", "BulkResult"]

log = logging.getLogger(__name__)

BATCH = 500
"""Job ids per SQL call (and per transaction)."""

MAX_IDS = 1000
"""Ids one request may name; larger sets are a filter's business."""

Action = Literal["cancel", "retry"]

APPLIES_TO: dict[str, tuple[str, ...]] = {
    "cancel": ("waiting", "scheduled", "queued", "claimed", "running"),
    "retry": ("dead_letter",),
}
"""The job statuses each action changes (codity.job_transitions: to cancelled, and the
replay of a dead letter). Jobs in any other state are skipped."""

_DONE = {"cancel": "cancelled", "retry": "retried"}
"""The outcome codity.cancel_jobs / retry_jobs answer for a job they changed."""

_SQL_CALL = {
    "cancel": "SELECT job_id, outcome FROM codity.cancel_jobs(%(ids)s, %(project_id)s)",
    "retry": "SELECT job_id, outcome FROM codity.retry_jobs(%(ids)s, %(project_id)s)",
}


class BulkAction(Strict):
    action: Action
    ids: list[JobId] | None = Field(
        None,
        min_length=1,
        max_length=MAX_IDS,
        description="Act on these jobs (role member). Give ids or filter, not both.",
    )
    filter: JobFilter | None = Field(
        None,
        description="Act on every job matching this filter, as GET /api/v1/jobs takes it "
        "(role admin). Give ids or filter, not both.",
    )
    dry_run: bool = Field(
        False, description="Change nothing; answer what a run would match, affect and skip."
    )
    as_of: AwareDatetime | None = Field(
        None,
        description="With filter: only jobs created at or before this time (a dry run's "
        "as_of), so jobs enqueued after the confirmation are left alone. Omitted: the time "
        "the run starts.",
    )
    up_to_id: JobId | None = Field(
        None,
        description="Deprecated, use as_of. With filter: only jobs with an id up to this one "
        "(a dry run's up_to_id). Ids carry no order across the nodes of a Citus cluster, "
        "where this does not leave newer jobs out.",
    )

    @model_validator(mode="after")
    def _one_scope(self) -> Self:
        if (self.ids is None) == (self.filter is None):
            raise ValueError("give either ids or filter (not both, not neither)")
        if self.ids is not None and (self.up_to_id is not None or self.as_of is not None):
            raise ValueError("as_of and up_to_id bound a filter; leave them out when giving ids")
        return self


class BulkResult(BaseModel):
    action: str
    matched: int
    """ids: how many distinct ids were given. filter: how many matching jobs (created at or
    before ``as_of``) were in a state the action applies to when the request began."""
    affected: int
    """Cancelled or retried; in a dry run, how many would be."""
    skipped: int
    """Matched but not changed: another project's or a missing id, a state the action does
    not apply to, or a job that changed state before its batch reached it."""
    as_of: dt.datetime | None
    """filter: the time the scope was counted at, or the ``as_of`` given (pass it back to
    confirm a dry run); ids: null."""
    up_to_id: int | None
    """filter: the highest id in scope (for clients written before ``as_of``); ids: null."""
    dry_run: bool
    batches: int
    """SQL calls made (each its own transaction); 0 in a dry run."""


# The jobs of a filter's scope, created up to a time (and, for older clients, id up to a
# bound), counted exactly: the operator confirms this number. Each queue is read through
# (queue_id, status, id), as the list does. The time is the one given, or now when none is
# or the one given is later (least() ignores a NULL).
_SCOPE = (
    """
SELECT count(*) AS n, max(j.id) AS top, least(%(as_of)s::timestamptz, now()) AS as_of"""
    + QUEUES
    + """
CROSS JOIN LATERAL (
    SELECT j.id FROM codity.jobs j
    WHERE j.queue_id = t.queue_id"""
    + JOB_MATCH
    + """
      AND j.created_at <= least(%(as_of)s::timestamptz, now())
      AND (%(up_to_id)s::bigint IS NULL OR j.id <= %(up_to_id)s::bigint)
) j
WHERE"""
    + QUEUE_MATCH
)

# The next batch of a filter's scope (created at or before the scope's ``as_of``): the
# highest ids at or below ``below``.
_NEXT_IDS = (
    """
SELECT j.id"""
    + QUEUES
    + """
CROSS JOIN LATERAL (
    SELECT j.id FROM codity.jobs j
    WHERE j.queue_id = t.queue_id"""
    + JOB_MATCH
    + """
      AND j.created_at <= %(as_of)s::timestamptz
      AND j.id <= %(below)s::bigint
    ORDER BY j.id DESC
    LIMIT %(batch)s
) j
WHERE"""
    + QUEUE_MATCH
    + """
ORDER BY j.id DESC
LIMIT %(batch)s
"""
)

_APPLICABLE_IDS = """
SELECT count(*) AS n
FROM codity.jobs j
JOIN codity.queues q ON q.id = j.queue_id
WHERE q.project_id = %(project_id)s AND j.id = ANY(%(ids)s::bigint[])
  AND j.status = ANY(%(statuses)s::codity.job_status[])
"""


def _statuses(action: str, wanted: list[str] | None) -> list[str]:
    """The statuses in scope: the filter's (all when it names none) the action applies to."""
    applies = APPLIES_TO[action]
    return [s for s in applies if wanted is None or s in wanted]


async def _in_transaction(
    call: Call[BulkAction, None], sql: str | None, params: dict[str, Any], action: str
) -> list[dict[str, Any]]:
    """One batch in a transaction of its own, for the request's user and tenant (the guard
    checked both when the request began): pick the ids with ``sql`` (or take
    ``params["ids"]``), then act on them. Answers one outcome row per id."""
    user_id = call.principal.user_id if call.principal else None
    async with transaction(call.pool, user_id=user_id) as conn:
        await set_tenant(conn, org_id=call.org_id, project_id=call.project_id)
        if sql is not None:
            cur = await conn.execute(match_query(sql, params), params, prepare=False)
            params = {**params, "ids": [r["id"] for r in await cur.fetchall()]}
        if not params["ids"]:
            return []
        cur = await conn.execute(_SQL_CALL[action], params)
        return [dict(r) for r in await cur.fetchall()]


def _changed(rows: list[dict[str, Any]], action: str) -> int:
    return sum(1 for r in rows if r["outcome"] == _DONE[action])


async def _by_ids(call: Call[BulkAction, None]) -> dict[str, Any]:
    body = call.body
    assert body.ids is not None
    ids = sorted(set(body.ids))
    affected = batches = 0
    if body.dry_run:
        params = {"project_id": call.project_id, "ids": ids}
        statuses = list(APPLIES_TO[body.action])
        cur = await call.conn.execute(_APPLICABLE_IDS, {**params, "statuses": statuses})
        found = await cur.fetchone()
        assert found is not None
        affected = int(found["n"])
    else:
        for start in range(0, len(ids), BATCH):
            params = {"project_id": call.project_id, "ids": ids[start : start + BATCH]}
            rows = await _in_transaction(call, None, params, body.action)
            affected += _changed(rows, body.action)
            batches += 1
    answer = {"action": body.action, "matched": len(ids), "up_to_id": None, "as_of": None}
    answer |= {"dry_run": body.dry_run, "batches": batches}
    return {**answer, "affected": affected, "skipped": len(ids) - affected}


async def _by_filter(call: Call[BulkAction, None]) -> dict[str, Any]:
    body = call.body
    assert body.filter is not None
    params = match_params(body.filter, call.project_id)
    params["status"] = _statuses(body.action, params["status"])
    answer: dict[str, Any] = {"action": body.action, "dry_run": body.dry_run, "batches": 0}
    bounds = {"as_of": body.as_of, "up_to_id": body.up_to_id}
    if not params["status"]:
        nothing = {"matched": 0, "affected": 0, "skipped": 0, "up_to_id": None}
        return {**answer, **nothing, "as_of": body.as_of}

    scope_sql = match_query(_SCOPE, params)
    cur = await call.conn.execute(scope_sql, {**params, **bounds}, prepare=False)
    scope = await cur.fetchone()
    assert scope is not None
    matched, top, as_of = int(scope["n"]), scope["top"], scope["as_of"]
    answer |= {"matched": matched, "up_to_id": top, "as_of": as_of}
    if body.dry_run or top is None:
        return {**answer, "affected": matched if body.dry_run else 0, "skipped": 0}

    affected, below = 0, int(top)
    while below >= 1:
        batch = {**params, "as_of": as_of, "below": below, "batch": BATCH}
        rows = await _in_transaction(call, _NEXT_IDS, batch, body.action)
        answer["batches"] += 1
        affected += _changed(rows, body.action)
        if len(rows) < BATCH:
            break
        below = min(r["job_id"] for r in rows) - 1
    return {**answer, "affected": affected, "skipped": max(0, matched - affected)}


async def bulk(call: Call[BulkAction, None]) -> dict[str, Any]:
    body = call.body
    if body.filter is not None and call.role < Role.ADMIN:
        raise ApiError(
            403,
            "forbidden",
            "acting on every job matching a filter needs the admin role; "
            f"you have {call.role.label} (select jobs by id instead)",
        )
    act = _by_ids if body.ids is not None else _by_filter
    if body.dry_run:
        return await act(call)
    with bulk_slot():
        result = await act(call)
    log.info(
        "jobs bulk action",
        extra={
            "action": body.action,
            "scope": "ids" if body.ids is not None else "filter",
            "matched": result["matched"],
            "affected": result["affected"],
            "skipped": result["skipped"],
        },
    )
    return result


ROUTES = [
    Endpoint(
        "POST",
        "/api/v1/jobs/bulk",
        Scope.PROJECT,
        bulk,
        "Cancel or retry jobs by id (member) or every job matching a filter (admin), "
        "in batches; a dry run answers the count and as_of to confirm",
        "jobs",
        min_role=Role.MEMBER,
        body=BulkAction,
        response=BulkResult,
        errors=(403, 422, 429),
        example={"action": "cancel", "ids": [41, 42], "dry_run": True},
    ),
]
