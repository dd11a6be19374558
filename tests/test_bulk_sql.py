"""codity.cancel_jobs and codity.retry_jobs: bulk actions by id, within one project.

Each id answers an outcome (cancelled / retried, skipped, missing) instead of raising, the
state is judged on the locked row, and another project's job is missing: never touched.
Break it first: ``test_dropping_the_project_filter_is_caught`` re-creates cancel_jobs
without its project filter and shows the cross-tenant check failing.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import pytest

from codity.db.migrate import sql_dir
from tests.sqlapi import NO_BACKOFF, Conn, create_queue, make_project, one, row
from tests.test_interleavings import opened, wait_until_blocked

PROJECT_FILTER = " AND q.project_id = v_project_id"


def _enqueue(conn: Conn, project: int, queue: str = "emails", *, delay: bool = False) -> int:
    return int(
        one(
            conn,
            "SELECT job_id FROM codity.enqueue(%s, 't', p_project_id => %s,"
            " p_run_at => CASE WHEN %s THEN now() + interval '1 hour' END)",
            [queue, project, delay],
        )
    )


def _worker(conn: Conn, project: int, queue: str = "emails") -> int:
    return int(
        one(
            conn,
            "SELECT codity.register_worker('w', ARRAY[%s], 5, 'h', 1, %s)",
            [queue, project],
        )
    )


def _claim(conn: Conn, worker: int, queue: str = "emails", *, start: bool) -> tuple[int, int]:
    job, fence = row(conn, "SELECT job_id, fence FROM codity.claim(%s, %s, 1)", [worker, queue])
    if start:
        conn.execute("SELECT codity.start(%s, %s)", [job, fence])
    return int(job), int(fence)


def _dead(conn: Conn, project: int, queue: str = "emails") -> int:
    """A job that failed for good (max_attempts 1 on the queue)."""
    worker = _worker(conn, project, queue)
    job = _enqueue(conn, project, queue)
    claimed, fence = _claim(conn, worker, queue, start=True)
    assert claimed == job
    conn.execute("SELECT codity.fail(%s, %s, 'boom', false)", [job, fence])
    return job


def _status(conn: Conn, job: int) -> str:
    return str(one(conn, "SELECT status::text FROM codity.jobs WHERE id = %s", [job]))


@pytest.fixture
def projects(conn: Conn) -> tuple[int, int]:
    """Two projects, each with a queue "emails" (one attempt, so one failure dead-letters)."""
    mine = make_project(conn, "mine")[1]
    theirs = make_project(conn, "theirs")[1]
    for project in (mine, theirs):
        create_queue(conn, "emails", project_id=project, max_attempts=1, **NO_BACKOFF)
    return mine, theirs


def test_cancel_jobs_cancels_unfinished_jobs_and_answers_every_id(
    conn: Conn, projects: tuple[int, int]
) -> None:
    mine, theirs = projects
    scheduled = _enqueue(conn, mine, delay=True)
    worker = _worker(conn, mine)
    _enqueue(conn, mine)
    running, fence = _claim(conn, worker, start=True)
    claimed = _enqueue(conn, mine)
    claimed_job, _ = _claim(conn, worker, start=False)
    assert claimed_job == claimed
    dead = _dead(conn, mine)
    queued = _enqueue(conn, mine)
    foreign = _enqueue(conn, theirs)
    missing = 9_000_000_000

    outcomes = {
        r[0]: (r[1], r[2])
        for r in conn.execute(
            "SELECT job_id, outcome, previous_status::text FROM codity.cancel_jobs(%s, %s)",
            [[scheduled, running, claimed, queued, dead, foreign, missing, queued, None], mine],
        )
    }
    assert outcomes == {
        scheduled: ("cancelled", "scheduled"),
        running: ("cancelled", "running"),
        claimed: ("cancelled", "claimed"),
        queued: ("cancelled", "queued"),
        dead: ("skipped", "dead_letter"),
        foreign: ("missing", None),
        missing: ("missing", None),
    }, "each distinct id once; another project's job reads as missing"
    for job in (scheduled, running, claimed, queued):
        assert _status(conn, job) == "cancelled"
    assert _status(conn, foreign) == "queued", "another project's job is never touched"
    assert row(
        conn,
        "SELECT status::text, error FROM codity.job_executions WHERE job_id = %s"
        " AND execution_seq = %s",
        [running, fence],
    ) == ("cancelled", "cancelled by an operator")
    again = conn.execute(
        "SELECT outcome FROM codity.cancel_jobs(%s, %s)", [[scheduled], mine]
    ).fetchall()
    assert again == [("skipped",)], "a second cancel skips what the first one cancelled"


def test_retry_jobs_replays_each_dead_letter_once_and_skips_the_rest(
    conn: Conn, projects: tuple[int, int]
) -> None:
    mine, theirs = projects
    dead = [_dead(conn, mine) for _ in range(3)]
    waiting = _enqueue(conn, mine)
    foreign = _dead(conn, theirs)

    outcomes = conn.execute(
        "SELECT job_id, outcome, dead_letter_id FROM codity.retry_jobs(%s, %s) ORDER BY job_id",
        [[*dead, waiting, foreign], mine],
    ).fetchall()
    letters = dict(
        conn.execute(
            "SELECT job_id, id FROM codity.dead_letters WHERE job_id = ANY(%s)", [dead]
        ).fetchall()
    )
    assert outcomes == sorted(
        [(job, "retried", letters[job]) for job in dead]
        + [(waiting, "skipped", None), (foreign, "missing", None)]
    )
    for job in dead:
        assert row(conn, "SELECT status::text, attempt FROM codity.jobs WHERE id = %s", [job]) == (
            "queued",
            0,
        )
    assert (
        one(
            conn,
            "SELECT count(*) FROM codity.dead_letters"
            " WHERE job_id = ANY(%s) AND replayed_at IS NULL",
            [dead],
        )
        == 0
    )
    assert _status(conn, foreign) == "dead_letter", "another project's job is never touched"
    assert (
        one(conn, "SELECT replayed_at FROM codity.dead_letters WHERE job_id = %s", [foreign])
        is None
    )
    again = conn.execute("SELECT outcome FROM codity.retry_jobs(%s, %s)", [dead, mine]).fetchall()
    assert again == [("skipped",)] * 3


def test_more_than_a_thousand_ids_is_refused_and_writes_nothing(
    conn: Conn, projects: tuple[int, int]
) -> None:
    mine, _ = projects
    job = _enqueue(conn, mine)
    for function in ("cancel_jobs", "retry_jobs"):
        with pytest.raises(psycopg.Error) as caught:
            conn.execute(f"SELECT * FROM codity.{function}(%s, %s)", [[job, *range(1, 1001)], mine])
        assert caught.value.sqlstate == "CD010"
        with pytest.raises(psycopg.Error) as null_ids:
            conn.execute(f"SELECT * FROM codity.{function}(NULL, %s)", [mine])
        assert null_ids.value.sqlstate == "CD010"
    assert _status(conn, job) == "queued"
    assert conn.execute("SELECT * FROM codity.cancel_jobs('{}', %s)", [mine]).fetchall() == []


def test_a_job_that_finishes_while_cancel_waits_for_its_lock_is_skipped(
    db_url: str, conn: Conn, projects: tuple[int, int]
) -> None:
    """The state is judged on the locked row: a worker completing the job first wins."""
    mine, _ = projects
    worker = _worker(conn, mine)
    _enqueue(conn, mine)
    job, fence = _claim(conn, worker, start=True)
    other = _enqueue(conn, mine)
    with opened(db_url) as connect, ThreadPoolExecutor(1) as pool:
        completer, canceller = connect(), connect()
        pid = one(canceller, "SELECT pg_backend_pid()")
        with completer.transaction():
            completer.execute("SELECT * FROM codity.complete(%s, %s)", [job, fence])
            pending = pool.submit(
                lambda: canceller.execute(
                    "SELECT job_id, outcome FROM codity.cancel_jobs(%s, %s) ORDER BY job_id",
                    [[job, other], mine],
                ).fetchall()
            )
            wait_until_blocked(conn, pid, pending)
        assert pending.result(timeout=20) == [(job, "skipped"), (other, "cancelled")]
    assert _status(conn, job) == "completed"


def test_a_dead_letter_another_replay_holds_is_skipped_without_waiting(
    db_url: str, conn: Conn, projects: tuple[int, int]
) -> None:
    mine, _ = projects
    held, free = _dead(conn, mine), _dead(conn, mine)
    with opened(db_url) as connect:
        replayer, bulk = connect(), connect()
        bulk.execute("SET lock_timeout = '2s'")
        with replayer.transaction():
            replayer.execute(
                "SELECT 1 FROM codity.dead_letters WHERE job_id = %s FOR UPDATE", [held]
            )
            outcomes = bulk.execute(
                "SELECT job_id, outcome FROM codity.retry_jobs(%s, %s) ORDER BY job_id",
                [[held, free], mine],
            ).fetchall()
    assert outcomes == [(held, "skipped"), (free, "retried")]
    assert _status(conn, held) == "dead_letter"


def _cancel_foreign(conn: Conn, projects: tuple[int, int]) -> list[Any]:
    """A bulk cancel naming another project's job: what it answers, and that job's state."""
    mine, theirs = projects
    foreign = _enqueue(conn, theirs)
    answered = conn.execute(
        "SELECT outcome FROM codity.cancel_jobs(%s, %s)", [[foreign], mine]
    ).fetchall()
    return [answered, _status(conn, foreign)]


def test_another_projects_job_is_never_cancelled(conn: Conn, projects: tuple[int, int]) -> None:
    assert _cancel_foreign(conn, projects) == [[("missing",)], "queued"]


def test_dropping_the_project_filter_is_caught(conn: Conn, projects: tuple[int, int]) -> None:
    """Break it first: cancel_jobs without ``AND q.project_id = v_project_id`` cancels the
    other project's job, and the check above sees it."""
    source = Path(sql_dir() / "functions" / "cancel_jobs.sql").read_text()
    assert source.count(PROJECT_FILTER) == 1
    conn.execute(source.replace(PROJECT_FILTER, ""))
    assert _cancel_foreign(conn, projects) != [[("missing",)], "queued"]
