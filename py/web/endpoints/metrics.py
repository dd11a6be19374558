"""``GET /api/v1/metrics``: the project's queues and workers in the Prometheus text format.

Every figure is read from the database, so any number of web replicas report the same
truth; a process answers a project's scrapes from one read for ``CODITY_METRICS_CACHE_SECONDS``
(5 s; ``codity.web.scrape_cache``), with its ``Age`` header, so several Prometheus replicas
scraping every few seconds cost one query set. Nothing is written, on the job hot path
or anywhere. The credential decides the project, as for every project route: an API key
(``Authorization: Bearer cdy_...``, viewer role is enough) is what a Prometheus scrape job
carries. Labels are queue names, job states, worker liveness and quantiles only: never a
payload value, a task argument or an email.

- **Jobs by state** (``codity_queue_jobs``, gauge): claimable (queued and due), scheduled
  (delayed, retries waiting out their backoff, or queued for later) and running (claimed
  or running), exact counts, each through its own partial index. The finished states are
  counters instead.
- **Counters** (``codity_executions_completed_total``, ``..._failed_total``,
  ``..._reaped_total``, ``codity_jobs_dead_lettered_total``): codity.queue_totals (added to
  by codity.roll_up, minute by minute, never decreasing; migration 0022) plus what finished
  since ``rollup_state.rolled_until``, counted live. Retention (codity.prune) deletes
  nothing after ``rolled_until``, so pruning never lowers a counter.
- **Durations over a recent window** (``codity_execution_duration_seconds`` from start to
  finish, ``codity_queue_wait_seconds`` from due to claimed; gauges with a ``quantile``
  label): the executions that finished in the last five minutes, at most the 10,000
  latest per queue. A quantile is absent when the window is empty.
- **Workers** (``codity_workers``, by liveness alive / stale / dead, as GET /workers
  defines them), **fence rejections** (``codity_fence_rejections_total``), the oldest
  claimable job's age and whether the queue is paused.
- **Health** (``codity_db_<check>`` and ``codity_health_alarm{check}``): codity.health's
  checks of the database as a whole (what holds vacuum back, the NOTIFY queue, bloat,
  replication slots). Installation-wide figures with no tenant data in them, so every
  project's credential sees them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.responses import Response

from codity.web.access import Role, Scope
from codity.web.call import Call
from codity.web.endpoint import Endpoint
from codity.web.endpoints.workers import LIVENESS
from codity.web.scrape_cache import ScrapeCache

__all__ = ["CONTENT_TYPE", "ROUTES", "WINDOW_SECONDS"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
WINDOW_SECONDS = 300
_WINDOW_ROWS = 10_000
QUANTILES = (0.5, 0.9, 0.99)
LIVE_STATES = ("claimable", "scheduled", "running")

# Per queue: exact counts of the states that change, each one index range (the partial
# indexes of migrations 0001 and 0010; under row-level security only a partial index
# serves a state), and the age of the oldest claimable job from codity.queue_depths with a
# cap of 1 (its loose index scan finds the oldest without a sort; the counts it also makes
# stop at one row).
_QUEUES = """
WITH d AS MATERIALIZED (
    SELECT d.queue_id, d.oldest_claimable_at FROM codity.queue_depths(%(project_id)s, p_cap => 1) d
), s AS MATERIALIZED (
    SELECT coalesce(r.rolled_until, '-infinity') AS since FROM codity.rollup_state r
)
SELECT q.id, q.name, q.is_paused,
       (SELECT count(*) FROM codity.jobs j
        WHERE j.queue_id = t.queue_id AND j.status = 'queued' AND j.run_at <= now())
           AS claimable,
       (SELECT count(*) FROM codity.jobs j
        WHERE j.queue_id = t.queue_id AND j.status = 'scheduled')
       + (SELECT count(*) FROM codity.jobs j
          WHERE j.queue_id = t.queue_id AND j.status = 'queued' AND j.run_at > now())
           AS scheduled,
       (SELECT count(*) FROM codity.jobs j
        WHERE j.queue_id = t.queue_id AND j.status IN ('claimed', 'running')) AS running,
       extract(epoch FROM now() - d.oldest_claimable_at)::float8 AS oldest_claimable_seconds,
       t.completed + live.completed AS completed,
       t.failed + live.failed AS failed,
       t.reaped + live.reaped AS reaped,
       t.dead_lettered
       + (SELECT count(*) FROM codity.dead_letters l
          WHERE l.queue_id = t.queue_id AND l.dead_at >= (SELECT s.since FROM s)) AS dead_lettered
FROM codity.queue_totals t
JOIN codity.queues q ON q.id = t.queue_id
LEFT JOIN d ON d.queue_id = t.queue_id
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE x.status = 'completed') AS completed,
           count(*) FILTER (WHERE x.status = 'failed') AS failed,
           count(*) FILTER (WHERE x.status = 'reaped') AS reaped
    FROM codity.job_executions x
    WHERE x.queue_id = t.queue_id AND x.finished_at >= (SELECT s.since FROM s)
) live
WHERE q.project_id = %(project_id)s
ORDER BY q.name
"""
"""Walked from codity.queue_totals, a row per queue (migration 0029), which the counters
read anyway: on a Citus cluster it is distributed with the jobs, and Citus plans the
subqueries into the jobs, executions and dead letters only correlated from a distributed
table on the queue id, never from codity.queues (a reference table). The oldest claimable
age comes from codity.queue_depths run first (a fenced CTE): a function in the FROM list
beside the shards' subqueries would otherwise be sent to the nodes with them. The rollup's
mark is read once, uncorrelated, for the same reason: Citus refuses an aggregate in a
LATERAL subquery that refers to a reference table's column."""

# The latest executions of each queue that finished in the window; the wait is from the
# job's run_at (when it became due; for a retry, when its backoff ended) to the claim.
_WINDOW = """
SELECT q.name, w.quantile,
       percentile_cont(w.quantile) WITHIN GROUP (ORDER BY r.run_seconds) AS run_seconds,
       percentile_cont(w.quantile) WITHIN GROUP (ORDER BY r.wait_seconds) AS wait_seconds
FROM codity.queue_totals t
JOIN codity.queues q ON q.id = t.queue_id
CROSS JOIN LATERAL (
    SELECT extract(epoch FROM x.finished_at - x.started_at)::float8 AS run_seconds,
           greatest(0, extract(epoch FROM x.claimed_at - j.run_at))::float8 AS wait_seconds
    FROM codity.job_executions x
    LEFT JOIN codity.jobs j ON j.queue_id = x.queue_id AND j.id = x.job_id
    WHERE x.queue_id = t.queue_id
      AND x.finished_at >= now() - pg_catalog.make_interval(secs => %(window)s)
    ORDER BY x.finished_at DESC
    LIMIT %(rows)s
) r
CROSS JOIN unnest(%(quantiles)s::float8[]) AS w (quantile)
WHERE q.project_id = %(project_id)s
GROUP BY t.queue_id, q.name, w.quantile
ORDER BY q.name, w.quantile
"""
"""From codity.queue_totals for the reason :data:`_QUEUES` gives; grouped by the queue's id
as well as its name, so that on a Citus cluster each queue's quantiles are computed beside
its executions (an ordered-set aggregate cannot be merged from partial results)."""

# GET /workers' liveness rule (stopped workers are not counted).
_WORKERS = (
    """
SELECT l.liveness, count(*) AS workers
FROM codity.workers w"""
    + LIVENESS
    + """
WHERE w.project_id = %(project_id)s AND w.status <> 'stopped'
GROUP BY l.liveness
"""
)

_HEALTH = "SELECT check_name, value, alarm FROM codity.health()"
HEALTH_HELP = {
    "oldest_transaction_seconds": "Age of the oldest open transaction of the database",
    "idle_in_transaction_sessions": "Sessions idle inside a transaction for over 30 s",
    "prepared_transaction_oldest_seconds": "Age of the oldest prepared (two-phase) transaction",
    "notify_queue_usage_ratio": "Share of the NOTIFY queue in use (full: enqueues fail)",
    "jobs_dead_tuples": "Dead row versions in codity.jobs not yet vacuumed",
    "claim_index_bytes_per_entry": "Size of the claim index over its entries (bloat)",
    "replication_slot_retained_bytes": "WAL kept on disk by the most demanding slot",
    "synchronous_standbys": "Synchronous standbys streaming (0 with one asked for: commits wait)",
    "seconds_since_primary_changed": "Seconds since the primary began its timeline; -1: never",
    "workers_silent": "Active workers not heard from for twice their heartbeat (reconnecting)",
}

# The rejections on record plus those pruned (codity.prune_housekeeping counts them into
# fence_rejection_totals as it deletes them): a total that never falls.
_FENCE_REJECTIONS = """
SELECT coalesce(q.name, '') AS queue, sum(r.n)::bigint AS rejections
FROM (
    SELECT f.queue_id, count(*) AS n FROM codity.fence_rejections f
    WHERE f.project_id = %(project_id)s GROUP BY f.queue_id
    UNION ALL
    SELECT t.queue_id, t.rejections FROM codity.fence_rejection_totals t
    WHERE t.project_id = %(project_id)s
) r
LEFT JOIN codity.queues q ON q.id = r.queue_id
GROUP BY 1
ORDER BY 1
"""


class _Scrape(Collector):
    """The rows read for one scrape, as metric families."""

    def __init__(
        self,
        queues: Sequence[Mapping[str, Any]],
        window: Sequence[Mapping[str, Any]],
        workers: Mapping[str, int],
        rejections: Sequence[Mapping[str, Any]],
        health: Sequence[Mapping[str, Any]],
    ) -> None:
        self.queues, self.window, self.workers = queues, window, workers
        self.rejections, self.health = rejections, health

    def collect(self) -> Iterator[Metric]:
        yield from self._queue_gauges()
        yield from self._counters()
        yield from self._durations()
        alive = GaugeMetricFamily(
            "codity_workers", "Workers registered and not stopped, by liveness", labels=["state"]
        )
        for state in ("alive", "stale", "dead"):
            alive.add_metric([state], self.workers.get(state, 0))
        yield alive
        rejected = CounterMetricFamily(
            "codity_fence_rejections",
            "Calls refused because their fence was stale (a worker that lost its lease)",
            labels=["queue"],
        )
        for row in self.rejections:
            rejected.add_metric([row["queue"]], row["rejections"])
        yield rejected
        yield from self._health()

    def _health(self) -> Iterable[Metric]:
        alarms = GaugeMetricFamily(
            "codity_health_alarm",
            "1 while a check of codity.health is past its threshold (docs/RUNBOOK.md)",
            labels=["check"],
        )
        for row in self.health:
            name = row["check_name"]
            help_text = HEALTH_HELP.get(name, name)
            yield GaugeMetricFamily(f"codity_db_{name}", help_text, value=row["value"])
            alarms.add_metric([row["check_name"]], 1 if row["alarm"] else 0)
        yield alarms

    def _queue_gauges(self) -> Iterable[Metric]:
        jobs = GaugeMetricFamily(
            "codity_queue_jobs", "Jobs in each state that changes, exact", labels=["queue", "state"]
        )
        oldest = GaugeMetricFamily(
            "codity_queue_oldest_claimable_age_seconds",
            "How long the oldest claimable job has been due (0: none waiting)",
            labels=["queue"],
        )
        paused = GaugeMetricFamily(
            "codity_queue_paused", "1 while the queue is paused", labels=["queue"]
        )
        for row in self.queues:
            for state in LIVE_STATES:
                jobs.add_metric([row["name"], state], row[state])
            oldest.add_metric([row["name"]], max(0.0, row["oldest_claimable_seconds"] or 0.0))
            paused.add_metric([row["name"]], 1 if row["is_paused"] else 0)
        return (jobs, oldest, paused)

    def _counters(self) -> Iterable[Metric]:
        families = (
            ("codity_executions_completed", "Executions that completed", "completed"),
            ("codity_executions_failed", "Executions that failed (retried or not)", "failed"),
            ("codity_executions_reaped", "Executions whose lease expired (reaped)", "reaped"),
            ("codity_jobs_dead_lettered", "Jobs moved to the dead letters", "dead_lettered"),
        )
        for name, documentation, column in families:
            family = CounterMetricFamily(name, documentation, labels=["queue"])
            for row in self.queues:
                family.add_metric([row["name"]], row[column])
            yield family

    def _durations(self) -> Iterable[Metric]:
        window = f"executions finished in the last {WINDOW_SECONDS} s, at most {_WINDOW_ROWS:,}"
        run = GaugeMetricFamily(
            "codity_execution_duration_seconds",
            f"Execution time, start to finish, quantiles over the {window}",
            labels=["queue", "quantile"],
        )
        wait = GaugeMetricFamily(
            "codity_queue_wait_seconds",
            f"Time from due to claimed, quantiles over the {window}",
            labels=["queue", "quantile"],
        )
        for row in self.window:
            labels = [row["name"], f"{row['quantile']:g}"]
            if row["run_seconds"] is not None:
                run.add_metric(labels, row["run_seconds"])
            if row["wait_seconds"] is not None:
                wait.add_metric(labels, row["wait_seconds"])
        return (run, wait)


async def _rows(call: Call[None, None], query: str, params: Mapping[str, Any]) -> list[Any]:
    cur = await call.conn.execute(query, params)
    return list(await cur.fetchall())


async def _scrape(call: Call[None, None]) -> bytes:
    project = {"project_id": call.project_id}
    window = {**project, "window": WINDOW_SECONDS, "rows": _WINDOW_ROWS,
              "quantiles": list(QUANTILES)}  # fmt: skip
    workers = {r["liveness"]: int(r["workers"]) for r in await _rows(call, _WORKERS, project)}
    registry = CollectorRegistry(auto_describe=False)
    registry.register(
        _Scrape(
            await _rows(call, _QUEUES, project),
            await _rows(call, _WINDOW, window),
            workers,
            await _rows(call, _FENCE_REJECTIONS, project),
            await _rows(call, _HEALTH, {}),
        )
    )
    return bytes(generate_latest(registry))


async def metrics(call: Call[None, None]) -> Response:
    scrapes: ScrapeCache = call.request.app.state.scrapes
    body, age = await scrapes.get(call.project_id, lambda: _scrape(call))
    return Response(body, media_type=CONTENT_TYPE, headers={"Age": str(age)})


ROUTES = [
    Endpoint(
        "GET",
        "/api/v1/metrics",
        Scope.PROJECT,
        metrics,
        "The project's queues and workers in the Prometheus text format",
        "metrics",
        min_role=Role.VIEWER,
        raw=True,
        media_type=CONTENT_TYPE,
    ),
]
