"""The project at a glance: job counts per queue and state, totals, live workers, and
dead letters waiting for an operator.

The states are the ones an operator acts on, as in the queue stats: ``claimable`` (queued
and due), ``scheduled`` (scheduled, or queued for later), ``running`` (claimed or running),
then the terminal ones.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from codity.web.access import Role, Scope
from codity.web.call import Call
from codity.web.endpoint import Endpoint
from codity.web.endpoints.queues import STATE_COUNTS
from codity.web.endpoints.workers import ALIVE_WITHIN_SECONDS

__all__ = ["ROUTES"]

STATES = ("claimable", "scheduled", "running", "completed", "failed", "dead_letter", "cancelled")


class Counts(BaseModel):
    claimable: int
    scheduled: int
    running: int
    completed: int
    failed: int
    dead_letter: int
    cancelled: int
    total: int


class QueueCounts(Counts):
    queue: str
    is_paused: bool


class Overview(BaseModel):
    queues: list[QueueCounts]
    totals: Counts
    workers_alive: int
    dead_letters_unreplayed: int


_PER_QUEUE = (
    """
SELECT q.name AS queue, q.is_paused,"""
    + STATE_COUNTS
    + """,
       count(j.id) AS total
FROM codity.queues q
LEFT JOIN codity.jobs j ON j.queue_id = q.id
WHERE q.project_id = %(project_id)s
GROUP BY q.id
ORDER BY q.name
"""
)

_PROJECT = """
SELECT (SELECT count(*) FROM codity.workers w
        WHERE w.project_id = %(project_id)s AND w.status = 'active'
          AND w.last_heartbeat_at > now() - pg_catalog.make_interval(secs => %(alive)s))
           AS workers_alive,
       (SELECT count(*) FROM codity.dead_letters d
        JOIN codity.queues q ON q.id = d.queue_id
        WHERE q.project_id = %(project_id)s AND d.replayed_at IS NULL)
           AS dead_letters_unreplayed
"""


async def overview(call: Call[None, None]) -> dict[str, Any]:
    params = {"project_id": call.project_id, "alive": ALIVE_WITHIN_SECONDS}
    cur = await call.conn.execute(_PER_QUEUE, params)
    queues = [dict(r) for r in await cur.fetchall()]
    totals = {key: sum(q[key] for q in queues) for key in (*STATES, "total")}
    cur = await call.conn.execute(_PROJECT, params)
    project = await cur.fetchone()
    assert project is not None
    return {"queues": queues, "totals": totals, **project}


ROUTES = [
    Endpoint(
        "GET",
        "/api/v1/overview",
        Scope.PROJECT,
        overview,
        "Job counts per queue and state, totals, live workers and unreplayed dead letters",
        "overview",
        min_role=Role.VIEWER,
        response=Overview,
    ),
]
