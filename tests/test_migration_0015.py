"""Migration 0015 carries an installation's rows over to the keys for scale-out.

A database is migrated to 0014 only (no functions: its rows are written directly, as the
functions of that version would have left them), filled in two projects with a job in every
state, executions, a dead letter whose job is referenced by a schedule, minutes and fence
rejections, then migrated to the end. Every row must still be there, each job-table row
must carry its queue's project, the references that stopped being foreign keys must keep
their ids, and the upgraded installation must run a job.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from codity.db.migrate import migrate, sql_dir
from tests.conftest import _with_database, drop_database
from tests.sqlapi import make_project, one

TABLES = ("jobs", "job_executions", "dead_letters", "queue_minutes", "fence_rejections")


@pytest.fixture
def empty_url(pg_server_url: str) -> Iterator[str]:
    name = f"codity_t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield _with_database(pg_server_url, name)
    finally:
        drop_database(pg_server_url, name)


def _migrated_to_0014(url: str, folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (folder / "migrations").mkdir(parents=True)
    (folder / "functions").mkdir()
    for path in sorted((sql_dir() / "migrations").glob("*.sql")):
        if path.name < "0015":
            shutil.copy(path, folder / "migrations" / path.name)
    monkeypatch.setenv("CODITY_SQL_DIR", str(folder))
    migrate(url)
    monkeypatch.delenv("CODITY_SQL_DIR")


def _fill(conn: psycopg.Connection[Any], project: int) -> dict[str, int]:
    """One queue of ``project`` with a job in each state and the rows around them."""
    queue = one(
        conn,
        "INSERT INTO codity.queues (project_id, name) VALUES (%s, 'q') RETURNING id",
        [project],
    )
    jobs: dict[str, int] = {"queue": queue}
    for status, attempt, held, started, finished in (
        ("queued", 0, False, False, False),
        ("scheduled", 0, False, False, False),
        ("claimed", 1, True, False, False),
        ("running", 1, True, True, False),
        ("completed", 1, False, True, True),
        ("dead_letter", 1, False, True, True),
    ):
        jobs[status] = one(
            conn,
            "INSERT INTO codity.jobs (queue_id, task, status, run_at, max_attempts, attempt,"
            " execution_seq, claimed_at, started_at, finished_at, lock_expires_at)"
            " VALUES (%(q)s, 'task', %(s)s::codity.job_status, now(), 1, %(a)s, %(a)s,"
            "  CASE WHEN %(a)s > 0 THEN now() END, CASE WHEN %(st)s THEN now() END,"
            "  CASE WHEN %(f)s THEN now() END,"
            "  CASE WHEN %(h)s THEN now() + interval '1 minute' END)"
            " RETURNING id",
            {"q": queue, "s": status, "a": attempt, "h": held, "st": started, "f": finished},
        )
    for status in ("completed", "dead_letter"):
        conn.execute(
            "INSERT INTO codity.job_executions (job_id, queue_id, execution_seq, attempt, status,"
            " claimed_at, started_at, finished_at)"
            " VALUES (%s, %s, 1, 1, %s::codity.execution_status, now(), now(), now())",
            [jobs[status], queue, "completed" if status == "completed" else "failed"],
        )
    conn.execute(
        "INSERT INTO codity.dead_letters"
        " (job_id, queue_id, task, payload, reason, attempts, dead_at)"
        " VALUES (%s, %s, 'task', '{}', 'failed: not retryable', 1, now())",
        [jobs["dead_letter"], queue],
    )
    conn.execute(
        "INSERT INTO codity.scheduled_jobs (project_id, queue_id, name, cron, task, next_run_at,"
        " last_job_id) VALUES (%s, %s, 's', '* * * * *', 'task', now(), %s)",
        [project, queue, jobs["completed"]],
    )
    conn.execute(
        "INSERT INTO codity.queue_minutes (queue_id, minute, completed)"
        " VALUES (%s, date_trunc('minute', now()), 1)",
        [queue],
    )
    conn.execute(
        "INSERT INTO codity.fence_rejections (job_id, queue_id, call, presented_fence)"
        " VALUES (%s, %s, 'complete', 9)",
        [jobs["running"], queue],
    )
    return jobs


def _counts(conn: psycopg.Connection[Any]) -> dict[str, int]:
    return {
        table: one(
            conn,
            sql.SQL("SELECT count(*) FROM codity.{}").format(sql.Identifier(table)).as_string(conn),
        )
        for table in TABLES
    }


def test_migration_0015_carries_every_row_over_and_the_upgrade_runs_a_job(
    empty_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _migrated_to_0014(empty_url, tmp_path / "sql", monkeypatch)
    with psycopg.connect(empty_url, autocommit=True) as conn:
        default = one(conn, "SELECT id FROM codity.projects WHERE is_default")
        _, second = make_project(conn, "upgraded")
        filled = {default: _fill(conn, default), second: _fill(conn, second)}
        conn.execute(
            "INSERT INTO codity.fence_rejections (job_id, call, presented_fence)"
            " VALUES (999999, 'complete', 1)"
        )
        before = _counts(conn)
    assert before == {t: n for t, n in zip(TABLES, (12, 4, 2, 2, 3), strict=True)}

    migrate(empty_url)

    with psycopg.connect(empty_url, autocommit=True) as conn:
        assert _counts(conn) == before
        for table in TABLES:
            wrong = one(
                conn,
                sql.SQL(
                    "SELECT count(*) FROM codity.{} t"
                    " LEFT JOIN codity.queues q ON q.id = t.queue_id"
                    " WHERE t.project_id IS DISTINCT FROM q.project_id"
                )
                .format(sql.Identifier(table))
                .as_string(conn),
            )
            assert wrong == 0, table
        for project, jobs in filled.items():
            assert (
                one(
                    conn,
                    "SELECT job_id FROM codity.dead_letters WHERE queue_id = %s",
                    [jobs["queue"]],
                )
                == jobs["dead_letter"]
            )
            assert (
                one(
                    conn,
                    "SELECT last_job_id FROM codity.scheduled_jobs WHERE project_id = %s",
                    [project],
                )
                == jobs["completed"]
            )
        assert (
            one(conn, "SELECT project_id FROM codity.fence_rejections WHERE job_id = 999999")
            is None
        )

        worker = one(
            conn, "SELECT codity.register_worker('w', ARRAY['q'], p_project_id => %s)", [second]
        )
        claimed = conn.execute(
            "SELECT job_id, fence FROM codity.claim(%s, 'q', 10, p_start => true)", [worker]
        ).fetchall()
        assert [job for job, _ in claimed] == [filled[second]["queued"]]
        outcome = conn.execute(
            "SELECT outcome::text FROM codity.complete_many(%s, %s)",
            [[claimed[0][0]], [claimed[0][1]]],
        ).fetchall()
        assert outcome == [("applied",)]
        assert (
            one(
                conn,
                "SELECT project_id FROM codity.job_executions WHERE job_id = %s",
                [claimed[0][0]],
            )
            == second
        )
