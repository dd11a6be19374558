"""Outcomes a retrying client can trust: applied, already_applied, or stale.

A client whose connection dies during COMMIT does not know whether its call landed and
repeats it. The repeat by the fence's owner must answer "already done by you" — accepted,
outcome ``already_applied``, nothing changed and no fence rejection logged — while a truly
stale fence (reaped, reclaimed, cancelled) is still refused and recorded. Each test makes
the first call, snapshots every table, repeats it, and compares. One connection is enough,
so each test runs in a rolled-back transaction (``tx``).
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.sqlapi import hold_one_job, one, row, table_snapshot

Conn = psycopg.Connection[Any]


@pytest.fixture
def held(tx: Conn) -> tuple[int, int, int]:
    return hold_one_job(tx)


def _rejections(conn: Conn) -> int:
    return int(one(conn, "SELECT count(*) FROM codity.fence_rejections"))


REPEATABLE = {
    "start": "SELECT accepted, outcome::text, job_status::text FROM codity.start(%s, %s)",
    "start_many": "SELECT accepted, outcome::text, job_status::text"
    " FROM codity.start_many(ARRAY[%s]::bigint[], ARRAY[%s])",
    "complete": "SELECT accepted, outcome::text, job_status::text"
    " FROM codity.complete(%s, %s, '{\"n\": 1}')",
    "complete_many": "SELECT accepted, outcome::text, job_status::text"
    " FROM codity.complete_many(ARRAY[%s]::bigint[], ARRAY[%s], ARRAY['{\"n\": 1}'::jsonb])",
    "fail": "SELECT accepted, outcome::text, job_status::text FROM codity.fail(%s, %s, 'boom')",
    "release": "SELECT accepted, outcome::text, job_status::text FROM codity.release(%s, %s)",
}


def call_twice(
    conn: Conn, call: str, job: int, fence: int
) -> tuple[tuple[Any, ...], tuple[Any, ...], dict[str, tuple[int, str]]]:
    """Make a fenced call on a held job, then repeat it; returns both answers (accepted,
    outcome, job status) and the table snapshot taken between them."""
    if call not in ("start", "start_many", "release"):
        conn.execute("SELECT codity.start(%s, %s)", [job, fence])
    first = row(conn, REPEATABLE[call], [job, fence])
    before = table_snapshot(conn)
    return first, row(conn, REPEATABLE[call], [job, fence]), before


@pytest.mark.parametrize("call", list(REPEATABLE))
def test_a_repeated_call_by_the_fences_owner_is_already_applied_and_changes_nothing(
    tx: Conn, held: tuple[int, int, int], call: str
) -> None:
    _worker, job, fence = held
    first, again, before = call_twice(tx, call, job, fence)
    assert first[:2] == (True, "applied")
    assert again == (True, "already_applied", first[2])
    assert table_snapshot(tx) == before, "the repeat wrote nothing, not even a rejection"
    assert _rejections(tx) == 0


def test_a_repeated_fail_reports_the_retry_it_scheduled_and_charges_nothing(
    tx: Conn, held: tuple[int, int, int]
) -> None:
    _worker, job, fence = held
    tx.execute("SELECT codity.start(%s, %s)", [job, fence])
    first = row(
        tx, "SELECT job_status::text, retry_at FROM codity.fail(%s, %s, 'boom')", [job, fence]
    )
    again = row(
        tx,
        "SELECT outcome::text, job_status::text, retry_at, detail FROM codity.fail(%s, %s, 'boom')",
        [job, fence],
    )
    assert again[:3] == ("already_applied", "scheduled", first[1])
    assert again[3] == f"already failed with fence {fence}; nothing changed"
    assert row(tx, "SELECT attempt, run_at FROM codity.jobs WHERE id = %s", [job]) == (
        1,
        first[1],
    )


def test_a_release_repeated_after_another_worker_took_the_job_is_still_already_applied(
    tx: Conn, held: tuple[int, int, int]
) -> None:
    """The execution of the presented fence is the ledger of that attempt: it was released,
    so the repeat landed before, even though the job has since moved on."""
    worker, job, fence = held
    tx.execute("SELECT codity.release(%s, %s)", [job, fence])
    (other,) = row(tx, "SELECT codity.register_worker('w2', ARRAY['emails'])")
    (new_fence,) = row(tx, "SELECT fence FROM codity.claim(%s, 'emails', 1)", [other])
    assert new_fence == fence + 1

    again = row(tx, "SELECT accepted, outcome::text FROM codity.release(%s, %s)", [job, fence])

    assert again == (True, "already_applied")
    assert row(tx, "SELECT status::text, worker_id FROM codity.jobs WHERE id = %s", [job]) == (
        "claimed",
        other,
    )
    assert _rejections(tx) == 0
    del worker


@pytest.mark.parametrize("call", ["start", "complete", "fail", "release"])
def test_a_truly_stale_fence_is_still_refused_and_recorded(
    tx: Conn, held: tuple[int, int, int], call: str
) -> None:
    _worker, job, fence = held
    tx.execute("SELECT codity.start(%s, %s)", [job, fence])
    reaped = tx.execute(
        "SELECT outcome FROM codity.reap(p_now => now() + interval '1 hour')"
    ).fetchall()
    assert reaped == [("requeued",)]
    query = REPEATABLE[call]
    before = _rejections(tx)

    refused = row(tx, query, [job, fence])

    assert refused == (False, "stale", "queued")
    assert _rejections(tx) == before + 1
    recorded = row(
        tx, "SELECT call, presented_fence FROM codity.fence_rejections ORDER BY id DESC LIMIT 1"
    )
    assert recorded == (call, fence)


def test_a_complete_after_an_operator_cancel_is_stale_not_already_applied(
    tx: Conn, held: tuple[int, int, int]
) -> None:
    _worker, job, fence = held
    tx.execute("SELECT codity.start(%s, %s)", [job, fence])
    tx.execute("SELECT codity.cancel(%s)", [job])
    refused = row(tx, REPEATABLE["complete"], [job, fence])
    assert refused == (False, "stale", "cancelled")
    assert _rejections(tx) == 1


def test_complete_many_given_one_job_twice_completes_it_once_with_the_first_result(
    tx: Conn, held: tuple[int, int, int]
) -> None:
    _worker, job, fence = held
    tx.execute("SELECT codity.start(%s, %s)", [job, fence])
    rows = tx.execute(
        "SELECT job_id, accepted, outcome::text FROM codity.complete_many("
        "ARRAY[%s, %s]::bigint[], ARRAY[%s, %s], ARRAY['{\"n\": 1}', '{\"n\": 2}']::jsonb[])",
        [job, job, fence, fence],
    ).fetchall()
    assert rows == [(job, True, "applied"), (job, True, "already_applied")]
    assert tx.execute(
        "SELECT status::text, result FROM codity.job_executions WHERE job_id = %s", [job]
    ).fetchall() == [("completed", {"n": 1})]
    assert _rejections(tx) == 0


def test_a_batch_naming_one_job_with_its_fence_and_a_stale_one_answers_each_alone(
    tx: Conn, held: tuple[int, int, int]
) -> None:
    _worker, job, fence = held
    tx.execute("SELECT codity.start(%s, %s)", [job, fence])
    rows = tx.execute(
        "SELECT accepted, outcome::text FROM codity.complete_many("
        "ARRAY[%s, %s]::bigint[], ARRAY[%s, %s])",
        [job, job, fence + 5, fence],
    ).fetchall()
    assert rows == [(False, "stale"), (True, "applied")]
    assert _rejections(tx) == 1
