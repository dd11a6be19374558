"""The project at a glance: per queue its counts, wait, live workers, the last hour's
throughput and what looks wrong; totals, live workers and dead letters to look at.

Nothing here counts every row, so the page stays fast at a million jobs:

- **Counts** come from ``codity.queue_depths`` and stop at ``count_cap`` (10,000). A queue's
  ``capped`` lists the states whose count reached the cap ("10,000+"); its ``total`` and the
  project ``totals`` are sums of capped counts, so they too are lower bounds whenever a
  ``capped`` list is not empty (``totals.capped``: the states capped in some queue).
  ``dead_letters_unreplayed`` stops at the cap as well (``dead_letters_unreplayed_capped``).
- **Throughput** (completed and failed executions per minute, the last 60 minutes, the
  current one included) reads the minutes that ``codity.roll_up`` closed (before
  ``rolled_until``) from ``codity.queue_minutes``, and counts only the later ones live from
  ``job_executions`` through ``job_executions_finished_idx``: a minute or two of rows while
  the scheduler ticks (at most the hour when it has not rolled up for that long).
- **Live workers** (``workers_alive``, and per queue ``live_workers``): active workers not
  silent for longer than ``codity.settings.worker_dead_after`` (the sweeper's rule, as the
  workers routes read it: alive or stale, not dead). A queue's live workers are those that
  serve it, by name or because they registered with no queue list (then they claim from
  every queue of their project, as ``codity.claim`` and ``codity.worker_queues`` allow).

**Problems**, per queue (``code`` and a sentence for people):

- ``paused``: the queue is paused; workers claim nothing from it.
- ``no_live_worker``: it has claimable jobs and no live worker serves it (flagged paused or
  not: resuming would still leave the jobs waiting).
- ``backlog_growing``: more jobs are claimable now than in the depth sample that
  ``roll_up`` took about five minutes ago (the minute five before ``rolled_until``; no
  sample: the queue was empty), *and* more than the queue completed in the last five
  minutes, so its workers are not draining it. Not judged when the rollup is more than two
  minutes behind (no recent sample to compare with).
- ``dead_letters_rising``: more jobs were dead-lettered in the last ten minutes than in the
  ten before. A burst shows; a steady trickle does not flag forever (the dead letters list
  shows it), and the first dead letter after a quiet spell does.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel

from codity.web.access import Role, Scope
from codity.web.call import Call
from codity.web.endpoint import Endpoint
from codity.web.endpoints.queues import COUNTED, DEPTHS, capped_states

__all__ = ["HOUR", "ROUTES"]

HOUR = 60
"""Points of throughput per queue: one a minute, the current minute last."""
_GROWTH_MINUTES = 5
_DEAD_WINDOW_MINUTES = 10

_UNCLAIMED_AFTER_S = 60
"""A queue with claimable jobs and a live worker serving it, not at its own limits, that no
worker has claimed from for this long is flagged "waiting behind another queue"."""
ProblemCode = Literal[
    "paused",
    "no_live_worker",
    "waiting_behind_another_queue",
    "backlog_growing",
    "dead_letters_rising",
]


class Counts(BaseModel):
    claimable: int
    scheduled: int
    running: int
    completed: int
    failed: int
    dead_letter: int
    cancelled: int
    total: int
    capped: list[str]
    """States whose count reached ``count_cap`` (in this queue; for totals, in any queue)."""


class Minute(BaseModel):
    minute: dt.datetime
    completed: int
    failed: int


class Problem(BaseModel):
    code: ProblemCode
    text: str


class QueueCounts(Counts):
    queue: str
    is_paused: bool
    oldest_claimable_seconds: float | None
    live_workers: int
    throughput: list[Minute]
    problems: list[Problem]


class HealthAlarm(BaseModel):
    check: str
    value: float
    threshold: float
    detail: str


class Overview(BaseModel):
    queues: list[QueueCounts]
    totals: Counts
    count_cap: int
    workers_alive: int
    dead_letters_unreplayed: int
    dead_letters_unreplayed_capped: bool
    rolled_until: dt.datetime | None
    health: list[HealthAlarm]
    """The checks of codity.health past their threshold: the database as a whole, not only
    this project (docs/RUNBOOK.md, "Health alarms"); empty when all is well."""


_PROJECT = """
SELECT date_trunc('minute', now()) AS this_minute,
       s.rolled_until,
       codity.count_cap() AS count_cap,
       (SELECT count(*) FROM codity.workers w, codity.settings st
        WHERE w.project_id = %(project_id)s AND w.status = 'active'
          AND w.last_heartbeat_at >= now() - st.worker_dead_after)
           AS workers_alive,
       (SELECT count(*) FROM (
            SELECT 1 FROM codity.dead_letters d
            JOIN codity.queues q ON q.id = d.queue_id
            WHERE q.project_id = %(project_id)s AND d.replayed_at IS NULL
            LIMIT codity.count_cap()) u)
           AS dead_letters_unreplayed
FROM codity.rollup_state s
"""

_PER_QUEUE = """
SELECT t.queue_id,
       (SELECT count(*) FROM codity.workers w, codity.settings st
        WHERE w.project_id = q.project_id AND w.status = 'active'
          AND w.last_heartbeat_at >= now() - st.worker_dead_after
          AND (pg_catalog.cardinality(w.queues) = 0 OR q.name = ANY (w.queues)))
           AS live_workers,
       (SELECT count(*) FROM (
            SELECT 1 FROM codity.dead_letters d
            WHERE d.queue_id = t.queue_id
              AND d.dead_at > now() - pg_catalog.make_interval(mins => %(dead)s)
            LIMIT codity.count_cap()) c)
           AS dead_recent,
       (SELECT count(*) FROM (
            SELECT 1 FROM codity.dead_letters d
            WHERE d.queue_id = t.queue_id
              AND d.dead_at > now() - pg_catalog.make_interval(mins => 2 * %(dead)s)
              AND d.dead_at <= now() - pg_catalog.make_interval(mins => %(dead)s)
            LIMIT codity.count_cap()) c)
           AS dead_before,
       q.max_running,
       q.rate_period_seconds,
       -- The last claim: of one held now (the job row, through jobs_lease_idx: as many
       -- as are running) or of a finished attempt, read from the 100 that finished last
       -- (job_executions_finished_idx). No index orders executions by claim time (one
       -- more entry per job on the hot path), and the max over all of a queue's history
       -- read every execution row: 2 s a page at 1,000,000 jobs. A later claim is missed
       -- only if its attempt ended before 100 attempts claimed earlier ended: the queue
       -- then reads as unclaimed for longer than it was, which matters only with its
       -- claimable jobs also waiting over a minute (_waiting_behind).
       extract(epoch FROM now() - greatest(
           (SELECT max(e.claimed_at) FROM (
                SELECT e.claimed_at FROM codity.job_executions e
                WHERE e.queue_id = t.queue_id AND e.finished_at IS NOT NULL
                ORDER BY e.finished_at DESC LIMIT 100) e),
           (SELECT max(j.claimed_at) FROM codity.jobs j
            WHERE j.queue_id = t.queue_id AND j.status IN ('claimed', 'running'))))::float8
           AS since_last_claim_seconds,
       CASE WHEN %(sampled)s::timestamptz IS NOT NULL THEN
           coalesce((SELECT m.claimable FROM codity.queue_minutes m
                     WHERE m.queue_id = t.queue_id AND m.minute = %(sampled)s::timestamptz), 0)
       END AS claimable_before
FROM codity.queue_totals t
JOIN codity.queues q ON q.id = t.queue_id
WHERE q.project_id = %(project_id)s
"""
"""Per queue, what its problems are judged on. The walk starts from codity.queue_totals (a
row per queue, distributed with the jobs on a Citus cluster, where Citus refuses a subquery
correlated from codity.queues, a reference table, into the dead letters); on one server it
is the same walk of the project's queues."""

_THROUGHPUT = """
SELECT m.queue_id, m.minute, m.completed, m.failed
FROM codity.queues q
JOIN codity.queue_minutes m
  ON m.queue_id = q.id AND m.minute >= %(since)s AND m.minute < %(live_from)s
WHERE q.project_id = %(project_id)s
UNION ALL
SELECT x.queue_id, date_trunc('minute', x.finished_at),
       count(*) FILTER (WHERE x.status = 'completed'),
       count(*) FILTER (WHERE x.status = 'failed')
FROM codity.queues q
JOIN codity.job_executions x
  ON x.queue_id = q.id AND x.finished_at >= %(live_from)s AND x.finished_at < %(until)s
WHERE q.project_id = %(project_id)s AND x.status IN ('completed', 'failed')
GROUP BY 1, 2
"""
"""Rolled minutes from the rollup, the rest live: the same rule as codity.roll_up (by finish
time, completed and failed executions), so a minute reads the same before and after it is
rolled up."""


def _amount(value: int, capped: bool) -> str:
    return f"{value:,}+" if capped else f"{value:,}"


def _problems(queue: Mapping[str, Any], extra: Mapping[str, Any], cap: int) -> list[dict[str, str]]:
    found: list[dict[str, str]] = []
    claimable = int(queue["claimable"])
    waiting = _amount(claimable, "claimable" in queue["capped"])
    if queue["is_paused"]:
        found.append({"code": "paused", "text": "Paused: workers claim nothing from it."})
    if claimable > 0 and queue["live_workers"] == 0:
        found.append(
            {
                "code": "no_live_worker",
                "text": f"{waiting} claimable, and no live worker serves this queue.",
            }
        )
    if _waiting_behind(queue, extra):
        found.append(
            {
                "code": "waiting_behind_another_queue",
                "text": f"{waiting} claimable and {queue['live_workers']} live worker(s) serve"
                f" this queue, yet nothing was claimed from it for over {_UNCLAIMED_AFTER_S} s:"
                " its workers are kept busy by other queues (see their weights).",
            }
        )
    before = extra["claimable_before"]
    drained = sum(p["completed"] for p in queue["throughput"][-_GROWTH_MINUTES:])
    if before is not None and claimable > before and claimable > drained:
        found.append(
            {
                "code": "backlog_growing",
                "text": f"Claimable grew from {before:,} to {waiting} in about"
                f" {_GROWTH_MINUTES} minutes; {drained:,} completed meanwhile.",
            }
        )
    recent, earlier = int(extra["dead_recent"]), int(extra["dead_before"])
    if recent > earlier:
        found.append(
            {
                "code": "dead_letters_rising",
                "text": f"{_amount(recent, recent >= cap)} dead-lettered in the last"
                f" {_DEAD_WINDOW_MINUTES} minutes, {_amount(earlier, earlier >= cap)} in the"
                f" {_DEAD_WINDOW_MINUTES} before.",
            }
        )
    return found


def _waiting_behind(queue: Mapping[str, Any], extra: Mapping[str, Any]) -> bool:
    """Claimable, served, not held back by its own pause, limit or rate, yet unclaimed."""
    if queue["is_paused"] or int(queue["claimable"]) == 0 or queue["live_workers"] == 0:
        return False
    if extra["max_running"] is not None and int(queue["running"]) >= extra["max_running"]:
        return False
    unclaimed = extra["since_last_claim_seconds"]
    if unclaimed is None:  # never claimed: as long as its oldest job has waited
        unclaimed = queue["oldest_claimable_seconds"] or 0.0
    quiet_for = max(_UNCLAIMED_AFTER_S, extra["rate_period_seconds"] or 0)
    return bool(unclaimed > quiet_for and (queue["oldest_claimable_seconds"] or 0.0) > quiet_for)


def _minutes(this_minute: dt.datetime) -> list[dt.datetime]:
    return [this_minute - dt.timedelta(minutes=HOUR - 1 - n) for n in range(HOUR)]


def _point(minute: dt.datetime, counts: tuple[int, int] | None) -> dict[str, Any]:
    completed, failed = counts or (0, 0)
    return {"minute": minute, "completed": completed, "failed": failed}


_ALARMS = """
SELECT check_name AS check, value, threshold, detail FROM codity.health() WHERE alarm
"""


async def overview(call: Call[None, None]) -> dict[str, Any]:
    conn = call.conn
    params: dict[str, Any] = {"project_id": call.project_id}
    cur = await conn.execute(_PROJECT, params)
    project = await cur.fetchone()
    assert project is not None
    this_minute: dt.datetime = project["this_minute"]
    rolled_until: dt.datetime | None = project["rolled_until"]
    since = this_minute - dt.timedelta(minutes=HOUR - 1)
    fresh = rolled_until is not None and rolled_until >= this_minute - dt.timedelta(minutes=2)

    cur = await conn.execute(DEPTHS, {**params, "queue": None})
    depths = [dict(r) for r in await cur.fetchall()]
    cur = await conn.execute(
        _PER_QUEUE,
        {
            **params,
            "dead": _DEAD_WINDOW_MINUTES,
            "sampled": rolled_until - dt.timedelta(minutes=_GROWTH_MINUTES)
            if fresh and rolled_until is not None
            else None,
        },
    )
    extras = {r["queue_id"]: r for r in await cur.fetchall()}
    cur = await conn.execute(
        _THROUGHPUT,
        {
            **params,
            "since": since,
            "live_from": max(rolled_until, since) if rolled_until is not None else since,
            "until": this_minute + dt.timedelta(minutes=1),
        },
    )
    counted: dict[tuple[int, dt.datetime], tuple[int, int]] = {}
    for r in await cur.fetchall():
        counted[(r["queue_id"], r["minute"])] = (r["completed"], r["failed"])

    cap = int(project["count_cap"])
    queues = []
    for depth in depths:
        extra = extras.get(depth["queue_id"])
        if extra is None:
            continue  # deleted between the two reads (each statement has its own snapshot)
        queue = {
            **depth,
            "total": sum(depth[state] for state in COUNTED),
            "capped": capped_states(depth),
            "live_workers": extra["live_workers"],
            "throughput": [
                _point(m, counted.get((depth["queue_id"], m))) for m in _minutes(this_minute)
            ],
        }
        queue["problems"] = _problems(queue, extra, cap)
        queues.append(queue)
    totals: dict[str, Any] = {key: sum(q[key] for q in queues) for key in (*COUNTED, "total")}
    totals["capped"] = [s for s in COUNTED if any(s in q["capped"] for q in queues)]
    unreplayed = int(project["dead_letters_unreplayed"])
    cur = await conn.execute(_ALARMS)
    return {
        "queues": queues,
        "totals": totals,
        "count_cap": cap,
        "workers_alive": project["workers_alive"],
        "dead_letters_unreplayed": unreplayed,
        "dead_letters_unreplayed_capped": unreplayed >= cap,
        "rolled_until": rolled_until,
        "health": [dict(r) for r in await cur.fetchall()],
    }


ROUTES = [
    Endpoint(
        "GET",
        "/api/v1/overview",
        Scope.PROJECT,
        overview,
        "Per queue: capped job counts, oldest wait, live workers, throughput of the last hour"
        " and problems; totals, live workers and unreplayed dead letters",
        "overview",
        min_role=Role.VIEWER,
        response=Overview,
    ),
]
