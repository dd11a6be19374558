"""Reads for SQL clients and DBAs: a job's outcome, its attempts, dead letters, rejections.

A producer holding only codity_worker learns what became of its job through
``codity.get_job`` / ``codity.get_job_executions``; a DBA (codity_readonly or codity_app)
finds a dead letter's id in ``codity.dead_letter_overview`` and replays it, and reads
``codity.fence_rejection_overview`` as the runbook says. Every read here is made as a real
login holding one role; tenancy of the views is proven in tests/test_web_rls.py.
"""

from __future__ import annotations

import psycopg
import pytest

from tests.logins import login_role
from tests.sqlapi import NO_BACKOFF, create_queue, make_project, row


def test_a_worker_login_follows_its_job_from_enqueue_to_result(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as admin:
        create_queue(admin, "emails", max_attempts=2, **NO_BACKOFF)
    with login_role(db_url, "codity_worker") as url, psycopg.connect(url, autocommit=True) as w:
        (job,) = row(w, "SELECT job_id FROM codity.enqueue('emails', 'emails.send')")
        state = "SELECT job_status::text, attempt, last_error, result FROM codity.get_job(%s)"
        assert row(w, state, [job]) == ("queued", 0, None, None)

        (worker,) = row(w, "SELECT codity.register_worker('w', ARRAY['emails'])")
        _, fence = row(w, "SELECT job_id, fence FROM codity.claim(%s, 'emails')", [worker])
        w.execute("SELECT codity.start(%s, %s)", [job, fence])
        w.execute("SELECT codity.fail(%s, %s, 'SMTPError: 451')", [job, fence])
        assert row(w, state, [job]) == ("scheduled", 1, "SMTPError: 451", None)

        with psycopg.connect(db_url, autocommit=True) as admin:
            admin.execute("SELECT codity.promote()")
        _, fence = row(w, "SELECT job_id, fence FROM codity.claim(%s, 'emails')", [worker])
        w.execute("SELECT codity.start(%s, %s)", [job, fence])
        w.execute('SELECT codity.complete(%s, %s, \'{"id": "msg-1"}\')', [job, fence])
        assert row(w, state, [job]) == ("completed", 2, "SMTPError: 451", {"id": "msg-1"})

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
        _, other = make_project(admin, "b")
        admin.execute("SELECT codity.create_queue('emails', %s)", [other])
        (job,) = row(
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
        assert row(w, "SELECT job_status::text FROM codity.get_job(%s, %s)", [job, other]) == (
            "queued",
        )


@pytest.mark.parametrize("role", ["codity_readonly", "codity_app"])
def test_a_dba_finds_dead_letters_and_rejections_by_view(db_url: str, role: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as admin:
        admin.execute("SELECT codity.create_queue('emails', p_max_attempts => 1)")
        (worker,) = row(admin, "SELECT codity.register_worker('w', ARRAY['emails'])")
        (job,) = row(admin, "SELECT job_id FROM codity.enqueue('emails', 'emails.send')")
        _, fence = row(admin, "SELECT job_id, fence FROM codity.claim(%s, 'emails')", [worker])
        admin.execute("SELECT codity.start(%s, %s)", [job, fence])
        admin.execute("SELECT codity.fail(%s, %s, 'bounced')", [job, fence])
        admin.execute("SELECT codity.complete(%s, %s)", [job, fence])  # stale: recorded
        (project,) = row(admin, "SELECT id FROM codity.projects WHERE is_default")
    with login_role(db_url, role) as url, psycopg.connect(url, autocommit=True) as dba:
        if role == "codity_app":  # the app role sees one tenant: the one its session names
            dba.execute("SELECT set_config('codity.project_id', %s, false)", [str(project)])
        letters = dba.execute(
            "SELECT dead_letter_id, queue, job_id, reason, error FROM codity.dead_letter_overview"
            " WHERE replayed_at IS NULL"
        ).fetchall()
        assert [letter[1:] for letter in letters] == [
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
            replayed = row(
                dba, "SELECT job_status::text FROM codity.replay_dead_letter(%s)", [letters[0][0]]
            )
            assert replayed == ("queued",)
            assert row(
                dba, "SELECT status::text FROM codity.job_overview WHERE job_id = %s", [job]
            ) == ("queued",)
