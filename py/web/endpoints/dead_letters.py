"""Dead letters: list, look at one, replay one, replay all that match a filter.

Replays go through codity.replay_dead_letter and codity.replay_dead_letters with the
guarded project (the latter locks FOR UPDATE SKIP LOCKED, so two replay-alls at once never
replay one letter twice). Reads select from the tables, filtered by project explicitly
on top of row-level security. A letter of another project reads exactly as a missing one.

Replaying all that match is a two-step action for people: a dry run answers the exact
count and ``as_of``, the database time it counted at; the confirmed run passes ``as_of``
back, so a letter dead-lettered after the confirmation is never swept in (one whose
transaction began before ``as_of`` and committed after it is as old as the others, and
falls inside). A time, not the highest id shown: ids carry no global order (DESIGN.md,
rule 5), and on a Citus cluster a letter written on a worker node draws its id from that
node's range, so a newer letter can have a lower id. ``up_to_id``, the highest id in
scope, is still answered and still honoured when given, for clients written before
``as_of``; on a cluster only ``as_of`` leaves the newer letters out. The
run itself goes in batches of :data:`BATCH`, each its own transaction (the tenant set as
the guard set it), so a replay of 100,000 letters never holds 100,000 row locks at once
and what is done stays done if the client goes away; the answer says how many were
replayed and how many were skipped: of the ``confirmed`` count the dry run showed (or of
those in scope when the run began), the ones another replay took first.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
from typing import Any

from pydantic import AwareDatetime, BaseModel, Field

from codity.web.access import Role, Scope
from codity.web.bulk_slots import bulk_slot
from codity.web.call import Call
from codity.web.database import set_tenant, transaction
from codity.web.endpoint import Endpoint, Reply
from codity.web.endpoints.queue_walk import QUEUE_MATCH, QUEUES, settled, shares
from codity.web.fields import MAX_ID, BoundedText, QueueName, Strict
from codity.web.lookups import fetch_all, one_or_404, path_id
from codity.web.paging import newest_first

__all__ = ["BATCH", "ROUTES"]

log = logging.getLogger(__name__)

BATCH = 500
"""Dead letters replayed per transaction by a replay-all."""

LEGACY_LIMIT = 100
"""A real replay-all that names neither ``limit`` nor a bound (``as_of``, or ``up_to_id``)
replays at most this many (as it always has): an unbounded replay must be bounded by a
confirmed dry run."""

_MICROSECOND = dt.timedelta(microseconds=1)


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
    dead_after: AwareDatetime | None = None
    dead_before: AwareDatetime | None = None
    as_of: AwareDatetime | None = Field(
        None,
        description="Replay only letters dead-lettered at or before this time (a dry run's "
        "as_of), so letters that arrive after the confirmation are left alone.",
    )
    up_to_id: int | None = Field(
        None,
        ge=1,
        le=MAX_ID,
        description="Deprecated, use as_of. Replay only letters with an id up to this one (a "
        "dry run's up_to_id). Ids carry no order across the nodes of a Citus cluster, where "
        "this does not leave newer letters out.",
    )
    limit: int | None = Field(
        None,
        ge=1,
        le=1000,
        description="At most this many. Omitted: every match when as_of or up_to_id is given "
        f"(or in a dry run), else {LEGACY_LIMIT}.",
    )
    dry_run: bool = Field(
        False,
        description="Replay nothing; answer the exact count a run with the returned as_of "
        "would replay.",
    )
    confirmed: int | None = Field(
        None,
        ge=0,
        le=MAX_ID,
        description="The count the operator confirmed (the dry run's): letters of it that "
        "another replay took since are answered as skipped.",
    )


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
    """Shaped as the jobs' bulk answer (matched / affected / skipped / as_of / batches)."""

    count: int
    """The same as ``affected`` (the name this answer had first)."""
    matched: int
    """Unreplayed letters in scope (dead at or before ``as_of``) when the request began."""
    affected: int
    """Replayed; in a dry run, how many a run with ``as_of`` would replay."""
    skipped: int
    """Of the ``confirmed`` count (else of ``matched``), those another replay took first."""
    as_of: dt.datetime
    """The time the scope was counted at, or the ``as_of`` given; pass it back to confirm a
    dry run."""
    up_to_id: int | None
    """The highest id in scope (None: nothing matched), for clients written before
    ``as_of``."""
    dry_run: bool
    batches: int
    """SQL calls made (each its own transaction); 0 in a dry run."""
    job_ids: list[int]
    """The jobs the letters went back into, in replay order: the first ``IDS_SHOWN`` only."""
    dead_letter_ids: list[int]
    """The letters replayed, in the same order and bound as ``job_ids``."""
    ids_truncated: bool
    """True: more were replayed than the lists show (``affected`` counts them all)."""


IDS_SHOWN = 1000
"""How many ids a replay-all answer lists: a run of 100,000 letters would otherwise answer
1.5 MB of ids that no page shows."""

_COLUMNS = """
SELECT d.id, d.job_id, q.name AS queue, d.task, d.priority, d.reason, d.error, d.attempts,
       d.dead_at, d.replayed_at, d.replayed_job_id
"""

_LETTER_MATCH = """
  AND (%(task)s::text IS NULL OR d.task = %(task)s::text)
  AND (%(dead_after)s::timestamptz IS NULL OR d.dead_at > %(dead_after)s::timestamptz)
  AND (%(dead_before)s::timestamptz IS NULL OR d.dead_at < %(dead_before)s::timestamptz)
"""
_REPLAYED_MATCH = """
  AND (%(replayed)s::boolean IS NULL OR (d.replayed_at IS NOT NULL) = %(replayed)s::boolean)
"""

_MATCHING = (
    """
FROM codity.dead_letters d
JOIN codity.queues q ON q.id = d.queue_id
WHERE"""
    + QUEUE_MATCH
    + _LETTER_MATCH
)

_LISTED = _MATCHING + _REPLAYED_MATCH

_LIST = (
    _COLUMNS
    + _LISTED
    + """
  AND (%(cursor)s::bigint IS NULL OR d.id < %(cursor)s::bigint)
ORDER BY d.id DESC
LIMIT %(fetch)s
"""
)

# Counted only up to the cap (one more row says "at least the cap"), never the whole set.
_CAPPED_COUNT = (
    "SELECT count(*) AS n, codity.count_cap() AS cap FROM (SELECT 1"
    + _LISTED
    + " LIMIT codity.count_cap() + 1) AS capped"
)

# The same count by shares (codity.web.endpoints.queue_walk): each queue's letters up to its
# share of the cap, summed on the coordinator.
_SHARES_COUNT = (
    "SELECT sum(c.n) AS total, sum(CASE WHEN c.n >= %(share)s THEN 1 ELSE 0 END) AS full"
    + QUEUES
    + """CROSS JOIN LATERAL (
    SELECT count(*) AS n FROM (
        SELECT 1 FROM codity.dead_letters d
        WHERE d.queue_id = t.queue_id"""
    + _LETTER_MATCH
    + _REPLAYED_MATCH
    + """        LIMIT %(share)s
    ) x
) c
WHERE"""
    + QUEUE_MATCH
)

_IN_SCOPE = (
    _MATCHING
    + """
  AND d.replayed_at IS NULL
  AND d.dead_at <= least(%(as_of)s::timestamptz, now())
  AND (%(up_to_id)s::bigint IS NULL OR d.id <= %(up_to_id)s::bigint)
"""
)

# What a replay-all would take: exact, since the operator confirms that number. With a
# limit, the count stops there. The time bound is the one given, or now when none is or
# the one given is later (least() ignores a NULL).
_BOUND = "least(%(as_of)s::timestamptz, now()) AS as_of"
_SCOPE = "SELECT count(*) AS n, max(d.id) AS up_to_id, " + _BOUND + _IN_SCOPE
_SCOPE_LIMITED = (
    "SELECT count(*) AS n, max(s.id) AS up_to_id, "
    + _BOUND
    + " FROM (SELECT d.id"
    + _IN_SCOPE
    + " ORDER BY d.id DESC LIMIT %(limit)s) AS s"
)

_ONE = (
    _COLUMNS
    + """, d.payload
FROM codity.dead_letters d
JOIN codity.queues q ON q.id = d.queue_id
WHERE q.project_id = %(project_id)s AND d.id = %(id)s
"""
)

_REPLAY_BATCH = """
SELECT dead_letter_id, job_id FROM codity.replay_dead_letters(
    p_project_id => %(project_id)s, p_queue => %(queue)s, p_task => %(task)s,
    p_dead_before => %(dead_before)s, p_limit => %(limit)s, p_up_to_id => %(up_to_id)s,
    p_dead_after => %(dead_after)s)
"""


async def list_dead_letters(call: Call[None, DeadLetterQuery]) -> Reply:
    """A page newest first, and how many match in all (capped: ``count_capped`` says the
    real number is larger)."""
    reply = await newest_first(call, _LIST, call.query)
    filters = call.query.model_dump(exclude={"limit", "cursor"})
    count, capped = await _count(call, {**filters, "project_id": call.project_id})
    meta = {**(reply.meta or {}), "count": count, "count_capped": capped}
    return Reply(reply.data, meta=meta)


async def _count(call: Call[Any, Any], params: dict[str, Any]) -> tuple[int, bool]:
    """How many letters match, up to the cap, and whether there are more: by shares, and
    over the queues as one set when the shares do not settle it."""
    cut = await shares(call, params)
    if cut.share is None:
        return 0, False
    by_shares = {**params, "share": cut.share}
    cur = await call.conn.execute(_SHARES_COUNT, by_shares, prepare=False)
    row = await cur.fetchone()
    assert row is not None
    found = settled(row["total"], row["full"], cut.cap)
    if found is not None:
        return found
    cur = await call.conn.execute(_CAPPED_COUNT, params)
    row = await cur.fetchone()
    assert row is not None
    return min(row["n"], row["cap"]), row["n"] > row["cap"]


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


async def _scope(
    call: Call[ReplayAll, None], limit: int | None
) -> tuple[int, int | None, dt.datetime]:
    """How many unreplayed letters match (at most ``limit``), the highest id among them and
    the time bound they were counted to; an unknown queue is 404 before anything is counted
    or replayed."""
    body = call.body
    if body.queue is not None:
        await one_or_404(
            call,
            "SELECT 1 FROM codity.queues q WHERE q.project_id = %s AND q.name = %s",
            [call.project_id, body.queue],
            "queue",
        )
    params = {
        **body.model_dump(
            include={"queue", "task", "dead_after", "dead_before", "as_of", "up_to_id"}
        ),
        "project_id": call.project_id,
        "limit": limit,
    }
    cur = await call.conn.execute(_SCOPE if limit is None else _SCOPE_LIMITED, params)
    row = await cur.fetchone()
    assert row is not None
    return int(row["n"]), row["up_to_id"], row["as_of"]


async def _replay_batch(
    call: Call[ReplayAll, None], params: dict[str, Any]
) -> list[dict[str, Any]]:
    """One batch in a transaction of its own, acting for the same user and tenant as the
    request (the guard checked both when the request began)."""
    user_id = call.principal.user_id if call.principal else None
    async with transaction(call.pool, user_id=user_id) as conn:
        await set_tenant(conn, org_id=call.org_id, project_id=call.project_id)
        cur = await conn.execute(_REPLAY_BATCH, params)
        return [dict(r) for r in await cur.fetchall()]


async def replay_all(call: Call[ReplayAll, None]) -> dict[str, Any]:
    body = call.body
    bounded = body.as_of is not None or body.up_to_id is not None or body.dry_run
    limit = body.limit if body.limit is not None else (None if bounded else LEGACY_LIMIT)
    matched, up_to_id, as_of = await _scope(call, limit)
    replayed: list[dict[str, Any]] = []
    batches = 0
    # codity.replay_dead_letters bounds dead_at by p_dead_before (exclusive): "at or before
    # as_of" is "before as_of plus a microsecond", timestamptz's resolution.
    until = as_of + _MICROSECOND
    params = {
        **body.model_dump(include={"queue", "task", "dead_after"}),
        "dead_before": until if body.dead_before is None else min(body.dead_before, until),
        "project_id": call.project_id,
        "up_to_id": body.up_to_id,
    }
    left = limit
    with contextlib.nullcontext() if body.dry_run else bulk_slot():
        while not body.dry_run and matched > 0 and (left is None or left > 0):
            size = BATCH if left is None else min(BATCH, left)
            batch = await _replay_batch(call, {**params, "limit": size})
            batches += 1
            replayed += batch
            left = None if left is None else left - len(batch)
            if len(batch) < size:
                break
    affected = matched if body.dry_run else len(replayed)
    expected = matched if body.confirmed is None else body.confirmed
    skipped = 0 if body.dry_run else max(0, expected - len(replayed))
    if not body.dry_run:
        log.info(
            "dead letters replayed",
            extra={"queue": body.queue, "count": affected, "skipped": skipped},
        )
    return {
        "count": affected,
        "matched": matched,
        "affected": affected,
        "skipped": skipped,
        "as_of": as_of,
        "up_to_id": up_to_id,
        "dry_run": body.dry_run,
        "batches": batches,
        "job_ids": [r["job_id"] for r in replayed[:IDS_SHOWN]],
        "dead_letter_ids": [r["dead_letter_id"] for r in replayed[:IDS_SHOWN]],
        "ids_truncated": len(replayed) > IDS_SHOWN,
    }


_ONE_PATH = "/api/v1/dead-letters/{dead_letter_id:int}"

ROUTES = [
    Endpoint(
        "GET",
        "/api/v1/dead-letters",
        Scope.PROJECT,
        list_dead_letters,
        "List dead letters, newest first, with filters, a capped count and keyset pagination",
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
        "Replay every unreplayed dead letter matching a filter, in batches"
        " (dry_run first: the exact count and as_of to confirm)",
        "dead-letters",
        min_role=Role.ADMIN,
        body=ReplayAll,
        response=ReplayedAll,
        errors=(404, 422, 429),
        example={"queue": "emails", "limit": 500},
    ),
]
