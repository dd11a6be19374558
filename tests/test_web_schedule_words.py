"""A schedule's cron in plain words (codity.web.cron_words), and the schedule reads that
carry them: ``description`` on every schedule, the state of the job it last enqueued, and
``GET /api/v1/schedules/{name}/jobs``.

The words are cron-descriptor's, but fed each field as codity.cron_next reads it; an
expression it cannot word comes back as itself, never as an exception.
"""

from __future__ import annotations

import psycopg
import pytest

from codity.web.access import Role
from codity.web.cron_words import describe_cron
from tests.test_web_schedules import add_queue, add_schedule, error_of
from tests.webapp import add_user, make_tenant, web_client


@pytest.mark.parametrize(
    ("cron", "words"),
    [
        ("0 2 * * *", "At 02:00, every day"),
        ("30 2,14 * * *", "At 02:30 and 14:30, every day"),
        ("*/15 * * * *", "Every 15 minutes"),
        ("* * * * *", "Every minute"),
        ("0 * * * *", "Every hour"),
        ("0 9 * * 1-5", "At 09:00, Monday through Friday"),
        ("0 9 * * mon-FRI", "At 09:00, Monday through Friday"),
        ("0 0 1 * *", "At 00:00, on day 1 of the month"),
        ("0 0 * jan,FEB sun", "At 00:00, only on Sunday, only in January and February"),
        # codity reads a step past the field's width as its first value only.
        ("*/100 * * * *", "Every hour"),
        # Day 7 is Sunday; with Saturday it reads as a week-end, not "Sunday and Saturday".
        ("0 0 * * 6,7", "At 00:00, only on Saturday and Sunday"),
        # Both day fields restricted and neither starred: either day matches (Vixie cron).
        ("0 0 13 * 5", "At 00:00, on day 13 of the month, or on Friday"),
        # A starred day-of-month step with a day of week: both must match.
        ("0 0 */2 * 1", "At 00:00, every 2 days, only on Monday"),
    ],
)
def test_crons_read_as_codity_runs_them(cron: str, words: str) -> None:
    assert describe_cron(cron) == words


@pytest.mark.parametrize(
    "cron", ["", "nonsense", "61 * * * *", "* * * *", "0 0 31 13 *", "*/0 * * * *", "5-1 * * * *"]
)
def test_an_expression_it_cannot_read_is_given_back_as_it_is(cron: str) -> None:
    assert describe_cron(cron) == cron


def test_every_schedule_read_carries_its_words_and_last_job(
    db_url: str, conn: psycopg.Connection
) -> None:
    tenant = make_tenant(conn)
    add_queue(conn, tenant)
    add_schedule(conn, tenant, "nightly", "0 2 * * *", "Europe/London")
    add_schedule(conn, tenant, "often", "*/15 * * * *")
    member = add_user(conn, tenant, Role.MEMBER)
    with web_client(db_url) as client:
        listed = client.get("/api/v1/schedules", headers=member.headers).json()["data"]
        assert [(s["name"], s["description"], s["time_zone"]) for s in listed] == [
            ("nightly", "At 02:00, every day", "Europe/London"),
            ("often", "Every 15 minutes", "UTC"),
        ]
        assert [(s["last_job_id"], s["last_job_status"]) for s in listed] == [(None, None)] * 2
        assert client.get("/api/v1/schedules/nightly/jobs", headers=member.headers).json() == {
            "data": []
        }

        runs = [
            client.post("/api/v1/schedules/nightly/run", headers=member.headers).json()["data"]
            for _ in range(3)
        ]
        one = client.get("/api/v1/schedules/nightly", headers=member.headers).json()["data"]
        assert one["last_job_id"] is None, "run now leaves the timetable (and last run) alone"
        conn.execute(
            "UPDATE codity.scheduled_jobs SET next_run_at = now() - interval '1 minute'"
            " WHERE name = 'nightly' AND project_id = %s",
            [tenant.project_id],
        )
        due = conn.execute("SELECT job_id FROM codity.materialize_cron()").fetchall()
        assert len(due) == 1
        one = client.get("/api/v1/schedules/nightly", headers=member.headers).json()["data"]
        assert (one["last_job_id"], one["last_job_status"]) == (due[0][0], "queued")
        runs.append({"job_id": due[0][0]})
        jobs = client.get(
            "/api/v1/schedules/nightly/jobs", params={"limit": 2}, headers=member.headers
        ).json()["data"]
        assert [(j["id"], j["status"], j["task"]) for j in jobs] == [
            (r["job_id"], "queued", "reports.nightly") for r in runs[::-1][:2]
        ]
        assert (
            client.get("/api/v1/schedules/often/jobs", headers=member.headers).json()["data"] == []
        )
        too_many = client.get(
            "/api/v1/schedules/nightly/jobs", params={"limit": 101}, headers=member.headers
        )
        assert too_many.status_code == 422


def test_another_projects_schedule_jobs_are_answered_like_a_missing_schedule(
    db_url: str, conn: psycopg.Connection
) -> None:
    ours, theirs = make_tenant(conn), make_tenant(conn)
    for tenant in (ours, theirs):
        add_queue(conn, tenant)
    add_schedule(conn, theirs, "secret")
    conn.execute("SELECT codity.run_schedule_now('secret', %s)", [theirs.project_id])
    viewer = add_user(conn, ours, Role.VIEWER)
    with web_client(db_url) as client:
        foreign = client.get("/api/v1/schedules/secret/jobs", headers=viewer.headers)
        missing = client.get("/api/v1/schedules/nothing/jobs", headers=viewer.headers)
        assert foreign.status_code == missing.status_code == 404
        assert error_of(foreign) == error_of(missing)
