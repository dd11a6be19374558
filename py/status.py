"""``codity status``: queues, workers and schedules at a glance, from the overview views,
and the database's health (codity.health: what quietly stops a queue) with every alarm."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import psycopg
from psycopg.rows import dict_row

from codity.db.conninfo import conninfo

__all__ = ["StatusRefused", "collect_status", "render_status"]

_QUEUES = """
SELECT o.project_id, o.queue, o.is_paused, o.claimable, o.scheduled, o.running, o.dead,
       extract(epoch FROM o.oldest_claimable_age)::float8 AS oldest_claimable_s, q.weight
FROM codity.queue_overview o JOIN codity.queues q ON q.id = o.queue_id
ORDER BY o.project_id, o.queue
"""
_WORKERS = """
SELECT worker_id, name, host, pid, status::text AS status, capacity, jobs_held,
       extract(epoch FROM heartbeat_age)::float8 AS heartbeat_age_s
FROM codity.worker_overview
WHERE status = 'active' OR heartbeat_age < interval '1 hour'
ORDER BY status, worker_id
"""
_SCHEDULES = """
SELECT name, queue, cron, time_zone, is_paused, next_run_at::text AS next_run_at
FROM codity.schedule_overview ORDER BY project_id, name
"""

_HEALTH = "SELECT check_name, value, threshold, alarm, detail FROM codity.health()"
# Whether this login reads every project's rows: a superuser, a login that bypasses row
# security, the schema's owner or a codity_readonly login does; codity_app and
# codity_worker see one project's, none without a tenant set: a status of empty tables.
# (to_regrole: on a database not migrated yet, the views' own error says what is wrong.)
_SEES_ALL = """
SELECT r.rolsuper OR r.rolbypassrls
       OR coalesce(pg_catalog.pg_has_role(current_user, pg_catalog.to_regrole('codity_owner'),
                                          'MEMBER'), false)
       OR coalesce(pg_catalog.pg_has_role(current_user, pg_catalog.to_regrole('codity_readonly'),
                                          'MEMBER'), false) AS sees_all,
       pg_catalog.to_regclass('codity.queue_overview') IS NOT NULL AS migrated
FROM pg_catalog.pg_roles r WHERE r.rolname = current_user
"""


class StatusRefused(Exception):
    """``codity status`` cannot show every project: a login that sees no project's rows
    without a tenant, or a database with no Codity schema. The message says what to do."""


def collect_status(url: str) -> dict[str, list[dict[str, Any]]]:
    with psycopg.connect(conninfo(url), row_factory=dict_row) as conn:
        row = conn.execute(_SEES_ALL).fetchone()
        if row is not None and not row["migrated"]:
            raise StatusRefused(
                f"database {conn.info.dbname} holds no Codity schema: run `codity migrate`"
                " first, or point DATABASE_URL at the database Codity was migrated into"
            )
        if row is not None and not row["sees_all"]:
            user = conn.info.user
            raise StatusRefused(
                f"status reads every project, and {user} sees one project's rows"
                " (a service login holding codity_app or codity_worker): run it with the URL"
                " of the login that migrates, or of a codity_readonly login (in Compose:"
                " docker compose run --rm migrate 'codity status')"
            )
        return {
            "queues": conn.execute(_QUEUES).fetchall(),
            "workers": conn.execute(_WORKERS).fetchall(),
            "schedules": conn.execute(_SCHEDULES).fetchall(),
            "health": conn.execute(_HEALTH).fetchall(),
        }


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return str(timedelta(seconds=round(seconds)))


def _state(row: dict[str, Any]) -> str:
    return "paused" if row["is_paused"] else "active"


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def render_status(status: dict[str, list[dict[str, Any]]], *, as_json: bool = False) -> str:
    if as_json:
        return json.dumps(status, indent=2, default=str)
    # Queues are named within a project: with several, the name alone is ambiguous.
    several = len({q["project_id"] for q in status["queues"]}) > 1
    queues = _table(
        ["project"] * several
        + ["queue", "state", "weight", "claimable", "scheduled", "running", "dead", "oldest"],
        [
            [str(q["project_id"])] * several
            + [q["queue"], _state(q), str(q["weight"]), str(q["claimable"]), str(q["scheduled"]),
               str(q["running"]), str(q["dead"]), _age(q["oldest_claimable_s"])]
            for q in status["queues"]
        ],
    )  # fmt: skip
    workers = _table(
        ["worker", "name", "status", "heartbeat", "jobs", "capacity"],
        [
            [str(w["worker_id"]), w["name"], w["status"], f"{_age(w['heartbeat_age_s'])} ago",
             str(w["jobs_held"]), str(w["capacity"])]
            for w in status["workers"]
        ],
    )  # fmt: skip
    schedules = _table(
        ["schedule", "queue", "cron", "time zone", "state", "next run"],
        [
            [s["name"], s["queue"], s["cron"], s["time_zone"], _state(s), s["next_run_at"]]
            for s in status["schedules"]
        ],
    )  # fmt: skip
    alarms = [h for h in status["health"] if h["alarm"]]
    health = "no alarm" if not alarms else _table(
        ["ALARM", "value", "threshold", "detail"],
        [[h["check_name"], f"{h['value']:g}", f"{h['threshold']:g}", h["detail"]]
         for h in alarms],
    )  # fmt: skip
    return (
        f"Queues\n{queues}\n\nWorkers\n{workers}\n\nSchedules\n{schedules}\n\n"
        f'Health (docs/RUNBOOK.md, "Health alarms")\n{health}'
    )
