"""Reads that walk a project's queues one by one, and the capped counts made that way.

A list or count over many queues is written as a walk of the project's queues with a
``LATERAL`` subquery per queue (:data:`QUEUES`, :data:`QUEUE_MATCH`): on one server each
queue is an index range, and on a Citus cluster each shard answers for its own queues.

**Counts by shares.** A count stops at ``codity.count_cap()``. Counted over the queues as
one set, it stops at the cap's worth of rows on one server, but on a Citus cluster every
shard sends the coordinator up to that many rows to be counted there, eight shards eight
times the rows. Counted queue by queue instead, each of the Q queues matched stops at its
share, ceil((cap + 1) / Q) rows, and a shard sends one number per queue:

- the shares add up to more than the cap: at least that many match, the count is capped;
- no queue filled its share: no queue was cut short, the sum is exact;
- otherwise (one queue full, the sum short): the caller counts again over the queues as one
  set (:func:`settled` answers None).

So no count reads much more than the cap's worth of rows on either kind of server
(docs/DESIGN_DECISIONS.md 78).
"""

from __future__ import annotations

from typing import Any

from codity.web.call import Call

__all__ = ["QUEUES", "QUEUE_MATCH", "Shares", "settled", "shares"]

QUEUES = """
FROM codity.queue_totals t
JOIN codity.queues q ON q.id = t.queue_id
"""
"""The project's queues, one row each, for a query that walks them queue by queue (alias
``t`` for the walk, ``q`` for the queue's name): from codity.queue_totals, which holds one
row per queue (migration 0029), not from codity.queues. On a Citus cluster queue_totals is
distributed with the jobs and queues is a reference table, and Citus plans a LATERAL
subquery over the jobs only from a distributed table it shares the queue id with; on one
server the plan is the same walk of a few rows."""

QUEUE_MATCH = """
q.project_id = %(project_id)s
  AND (%(queue)s::text IS NULL OR q.name = %(queue)s::text)
"""
"""The queues of a filter (aliases ``t`` and ``q`` of :data:`QUEUES`): the project's, or
its one named queue."""

_MATCHED = "SELECT count(*) AS queues, codity.count_cap() AS cap FROM codity.queues q WHERE"
_MATCHED += QUEUE_MATCH


class Shares:
    """The cap, and each matched queue's share of it (None: no queue matches)."""

    def __init__(self, cap: int, queues: int) -> None:
        self.cap = cap
        self.share = None if queues == 0 else -(-(cap + 1) // queues)


async def shares(call: Call[Any, Any], params: dict[str, Any]) -> Shares:
    """The shares for the queues ``params`` match (``project_id`` and ``queue``): one read
    of codity.queues, a reference table on a Citus cluster, so the coordinator's own."""
    cur = await call.conn.execute(_MATCHED, params, prepare=False)
    found = await cur.fetchone()
    assert found is not None
    return Shares(int(found["cap"]), int(found["queues"]))


def settled(total: int | None, full: int | None, cap: int) -> tuple[int, bool] | None:
    """The count and whether it is capped, from the sum of the queues' counts by shares and
    how many filled their share; None when it must be counted again as one set."""
    total, full = int(total or 0), int(full or 0)
    if total > cap:
        return cap, True
    if full == 0:
        return total, False
    return None
