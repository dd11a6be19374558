"""The demo data set has what the seed's Quickstart promises, and status reports it."""

from __future__ import annotations

import json

import psycopg

from codity.demo import QUEUES, seed_demo
from codity.status import collect_status, render_status


def test_demo_seeds_three_queues_a_schedule_retry_history_and_dead_letters(
    db_url: str, conn: psycopg.Connection
) -> None:
    conn.execute("SELECT codity.create_queue('leftover')")
    conn.execute("SELECT codity.pause_queue('leftover')")

    seed_demo(db_url)
    seed_demo(db_url)  # a second run resets instead of piling up

    policies = conn.execute(
        "SELECT name, max_attempts, backoff::text, is_paused FROM codity.queues ORDER BY name"
    ).fetchall()
    assert [p[0] for p in policies] == ["emails", "reports", "webhooks"]
    assert len({(p[1], p[2]) for p in policies}) == 3, "retry policies differ"
    assert not any(p[3] for p in policies)
    assert {q.name for q in QUEUES} == {p[0] for p in policies}

    schedules = conn.execute("SELECT cron, is_paused FROM codity.scheduled_jobs").fetchall()
    assert schedules == [("* * * * *", False)]

    retried = conn.execute(
        "SELECT count(*) FROM codity.job_executions x JOIN codity.jobs j ON j.id = x.job_id "
        "WHERE x.status = 'failed' AND j.status = 'scheduled'"
    ).fetchone()
    assert retried == (6,)
    reasons = conn.execute(
        "SELECT reason, count(*) FROM codity.dead_letters GROUP BY 1 ORDER BY 1"
    ).fetchall()
    assert reasons == [("failed: max attempts reached (1/1)", 3), ("failed: not retryable", 2)]
    waiting = conn.execute("SELECT count(*) FROM codity.jobs WHERE status = 'queued'").fetchone()
    assert waiting is not None and waiting[0] >= 50
    workers = conn.execute("SELECT status::text FROM codity.workers").fetchall()
    assert workers == [("stopped",)], "the seeding worker deregistered"


def test_status_reports_queues_workers_and_schedules(db_url: str) -> None:
    seed_demo(db_url)
    status = collect_status(db_url)

    by_queue = {q["queue"]: q for q in status["queues"]}
    assert by_queue["emails"]["dead"] == 2
    assert by_queue["webhooks"]["dead"] == 3
    assert by_queue["emails"]["claimable"] == 30
    assert by_queue["reports"]["scheduled"] == 1
    assert [s["name"] for s in status["schedules"]] == ["reports-every-minute"]

    text = render_status(status)
    assert "emails" in text and "reports-every-minute" in text and "Workers" in text
    assert json.loads(render_status(status, as_json=True))["queues"][0]["queue"] == "emails"
