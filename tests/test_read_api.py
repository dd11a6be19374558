"""Reads for SQL clients and DBAs: a job's outcome, its attempts, dead letters, rejections.

A producer holding only codity_worker learns what became of its job through
``codity.get_job`` / ``codity.get_job_executions``; a DBA (codity_readonly or codity_app)
finds a dead letter's id in ``codity.dead_letter_overview`` and replays it, and reads
``codity.fence_rejection_overview`` as the runbook says. Every read here is made as a real
login holding one role; tenancy of the views is proven in tests/test_web_rls.py.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.logins import login_role

Conn = psycopg.Connection[Any]


def _one(conn: Conn, query: str, params: list[Any] | None = None) -> tuple[Any, ...]:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return tuple(row)


def test_a_worker_login_follows_its_job_from_enqueue_to_result(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as admin:
        admin.execute(
            "SELECT codity.create_queue('emails', p_max_attempts => 2, p_backoff => 'fixed',"
            " p_base_delay_ms => 0, p_max_delay_ms => 0)"
        )
    with login_role(db_url, "codity_worker") as url, psycopg.connect(url, autocommit=True) as w:
        (job,) = _one(w, "SELECT job_id FROM codity.enqueue('emails', 'emails.send')")
        state = "SELECT job_status::text, attempt, last_error, result FROM codity.get_job(%s)"
        assert _one(w, state, [job]) == ("queued", 0, None, None)

        (worker,) = _one(w, "SELECT codity.register_worker('w', ARRAY['emails'])")
        _, fence = _one(w, "SELECT job_id, fence FROM codity.claim(%s, 'emails')", [worker])
        w.execute("SELECT codity.start(%s, %s)", [job, fence])
        w.execute("SELECT codity.fail(%s, %s, 'SMTPError: 451')", [job, fence])
        assert _one(w, state, [job]) == ("scheduled", 1, "SMTPError: 451", None)

        with psycopg.connect(db_url, autocommit=True) as admin:
            admin.execute("SELECT codity.promote()")
        _, fence = _one(w, "SELECT job_id, fence FROM codity.claim(%s, 'emails')", [worker])
        w.execute("SELECT codity.start(%s, %s)", [job, fence])
        w.execute('SELECT codity.complete(%s, %s, \'{"id": "msg-1"}\')', [job, fence])
        assert _one(w, state, [job]) == ("completed", 2, "SMTPError: 451", {"id": "msg-1"})

        attempts = w.execute(
            "SELECT fence, attempt, execution_status::text, error, result"
            " FROM codity.get_job_executions(%s)",
            [job],
        ).fetchall()
        assert attempts == [
            (1, 1, "failed", "SMTPError: 451", None),
            (2, 2, "completed", None, {"id": "msg-1"}),
        ]
        with pytest.raises(psycopg.Error) as missing:
            w.execute("SELECT * FROM codity.get_job(987654)")
        assert missing.value.sqlstate == "CD003"


def test_a_job_of_another_project_reads_as_missing(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as admin:
        org = _one(admin, "INSERT INTO codity.orgs (slug, name) VALUES ('b', 'B') RETURNING id")
        (other,) = _one(
            admin,
            "INSERT INTO codity.projects (org_id, slug, name) VALUES (%s, 'p', 'P') RETURNING id",
            [org[0]],
        )
        admin.execute("SELECT codity.create_queue('emails', %s)", [other])
        (job,) = _one(
            admin, "SELECT job_id FROM codity.enqueue('emails', 't', p_project_id => %s)", [other]
        )
    with login_role(db_url, "codity_worker") as url, psycopg.connect(url, autocommit=True) as w:
        for query in (
            "SELECT * FROM codity.get_job(%s)",
            "SELECT * FROM codity.get_job_executions(%s)",
        ):
            with pytest.raises(psycopg.Error) as missing:
                w.execute(query, [job])
            assert missing.value.sqlstate == "CD003"
        assert _one(w, "SELECT job_status::text FROM codity.get_job(%s, %s)", [job, other]) == (
            "queued",
        )


@pytest.mark.parametrize("role", ["codity_readonly", "codity_app"])
def test_a_dba_finds_dead_letters_and_rejections_by_view(db_url: str, role: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as admin:
        admin.execute("SELECT codity.create_queue('emails', p_max_attempts => 1)")
        (worker,) = _one(admin, "SELECT codity.register_worker('w', ARRAY['emails'])")
        (job,) = _one(admin, "SELECT job_id FROM codity.enqueue('emails', 'emails.send')")
        _, fence = _one(admin, "SELECT job_id, fence FROM codity.claim(%s, 'emails')", [worker])
        admin.execute("SELECT codity.start(%s, %s)", [job, fence])
        admin.execute("SELECT codity.fail(%s, %s, 'bounced')", [job, fence])
        admin.execute("SELECT codity.complete(%s, %s)", [job, fence])  # stale: recorded
        (project,) = _one(admin, "SELECT id FROM codity.projects WHERE is_default")
    with login_role(db_url, role) as url, psycopg.connect(url, autocommit=True) as dba:
        if role == "codity_app":  # the app role sees one tenant: the one its session names
            dba.execute("SELECT set_config('codity.project_id', %s, false)", [str(project)])
        letters = dba.execute(
            "SELECT dead_letter_id, queue, job_id, reason, error FROM codity.dead_letter_overview"
            " WHERE replayed_at IS NULL"
        ).fetchall()
        assert [row[1:] for row in letters] == [
            ("emails", job, "failed: max attempts reached (1/1)", "bounced")
        ]
        rejections = dba.execute(
            "SELECT queue, job_id, call, presented_fence, job_status::text"
            " FROM codity.fence_rejection_overview"
        ).fetchall()
        assert rejections == [("emails", job, "complete", fence, "dead_letter")]
        attempts = dba.execute(
            "SELECT fence, execution_status, error FROM"
            " (SELECT fence, status::text AS execution_status, error FROM codity.execution_overview"
            "  WHERE job_id = %s) x",
            [job],
        ).fetchall()
        assert attempts == [(fence, "failed", "bounced")]
        if role == "codity_app":
            replayed = _one(
                dba, "SELECT job_status::text FROM codity.replay_dead_letter(%s)", [letters[0][0]]
            )
            assert replayed == ("queued",)
            assert _one(
                dba, "SELECT status::text FROM codity.job_overview WHERE job_id = %s", [job]
            ) == ("queued",)
