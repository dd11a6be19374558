"""Outcomes a retrying client can trust: applied, already_applied, or stale.

A client whose connection dies during COMMIT does not know whether its call landed and
repeats it. The repeat by the fence's owner must answer "already done by you" — accepted,
outcome ``already_applied``, nothing changed and no fence rejection logged — while a truly
stale fence (reaped, reclaimed, cancelled) is still refused and recorded. Each test makes
the first call, snapshots every table, repeats it, and compares.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.test_bad_input import table_snapshot

Conn = psycopg.Connection[Any]


def _one(conn: Conn, query: str, params: list[Any] | None = None) -> tuple[Any, ...]:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return tuple(row)


def hold_one_job(conn: Conn) -> tuple[int, int, int]:
    """A worker and one job it has claimed: (worker, job, fence)."""
    conn.execute("SELECT codity.create_queue('emails', p_max_attempts => 3)")
    (worker,) = _one(conn, "SELECT codity.register_worker('w', ARRAY['emails'])")
    conn.execute("SELECT codity.enqueue('emails', 'emails.send')")
    job, fence = _one(conn, "SELECT job_id, fence FROM codity.claim(%s, 'emails', 1)", [worker])
    return int(worker), int(job), int(fence)


@pytest.fixture
def held(conn: Conn) -> tuple[int, int, int]:
    return hold_one_job(conn)


def _rejections(conn: Conn) -> int:
    return int(_one(conn, "SELECT count(*) FROM codity.fence_rejections")[0])


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
    first = _one(conn, REPEATABLE[call], [job, fence])
    before = table_snapshot(conn)
    return first, _one(conn, REPEATABLE[call], [job, fence]), before


@pytest.mark.parametrize("call", list(REPEATABLE))
def test_a_repeated_call_by_the_fences_owner_is_already_applied_and_changes_nothing(
    conn: Conn, held: tuple[int, int, int], call: str
) -> None:
    _worker, job, fence = held
    first, again, before = call_twice(conn, call, job, fence)
    assert first[:2] == (True, "applied")
    assert again == (True, "already_applied", first[2])
    assert table_snapshot(conn) == before, "the repeat wrote nothing, not even a rejection"
    assert _rejections(conn) == 0


def test_a_repeated_fail_reports_the_retry_it_scheduled_and_charges_nothing(
    conn: Conn, held: tuple[int, int, int]
) -> None:
    _worker, job, fence = held
    conn.execute("SELECT codity.start(%s, %s)", [job, fence])
    first = _one(
        conn, "SELECT job_status::text, retry_at FROM codity.fail(%s, %s, 'boom')", [job, fence]
    )
    again = _one(
        conn,
        "SELECT outcome::text, job_status::text, retry_at, detail FROM codity.fail(%s, %s, 'boom')",
        [job, fence],
    )
    assert again[:3] == ("already_applied", "scheduled", first[1])
    assert again[3] == f"already failed with fence {fence}; nothing changed"
    assert _one(conn, "SELECT attempt, run_at FROM codity.jobs WHERE id = %s", [job]) == (
        1,
        first[1],
    )


def test_a_release_repeated_after_another_worker_took_the_job_is_still_already_applied(
    conn: Conn, held: tuple[int, int, int]
) -> None:
    """The execution of the presented fence is the ledger of that attempt: it was released,
    so the repeat landed before, even though the job has since moved on."""
    worker, job, fence = held
    conn.execute("SELECT codity.release(%s, %s)", [job, fence])
    (other,) = _one(conn, "SELECT codity.register_worker('w2', ARRAY['emails'])")
    (new_fence,) = _one(conn, "SELECT fence FROM codity.claim(%s, 'emails', 1)", [other])
    assert new_fence == fence + 1

    again = _one(conn, "SELECT accepted, outcome::text FROM codity.release(%s, %s)", [job, fence])

    assert again == (True, "already_applied")
    assert _one(conn, "SELECT status::text, worker_id FROM codity.jobs WHERE id = %s", [job]) == (
        "claimed",
        other,
    )
    assert _rejections(conn) == 0
    del worker


@pytest.mark.parametrize("call", ["start", "complete", "fail", "release"])
def test_a_truly_stale_fence_is_still_refused_and_recorded(
    conn: Conn, held: tuple[int, int, int], call: str
) -> None:
    _worker, job, fence = held
    conn.execute("SELECT codity.start(%s, %s)", [job, fence])
    reaped = conn.execute(
        "SELECT outcome FROM codity.reap(p_now => now() + interval '1 hour')"
    ).fetchall()
    assert reaped == [("requeued",)]
    query = REPEATABLE[call]
    before = _rejections(conn)

    refused = _one(conn, query, [job, fence])

    assert refused == (False, "stale", "queued")
    assert _rejections(conn) == before + 1
    recorded = _one(
        conn, "SELECT call, presented_fence FROM codity.fence_rejections ORDER BY id DESC LIMIT 1"
    )
    assert recorded == (call, fence)


def test_a_complete_after_an_operator_cancel_is_stale_not_already_applied(
    conn: Conn, held: tuple[int, int, int]
) -> None:
    _worker, job, fence = held
    conn.execute("SELECT codity.start(%s, %s)", [job, fence])
    conn.execute("SELECT codity.cancel(%s)", [job])
    refused = _one(conn, REPEATABLE["complete"], [job, fence])
    assert refused == (False, "stale", "cancelled")
    assert _rejections(conn) == 1


def test_complete_many_given_one_job_twice_completes_it_once_with_the_first_result(
    conn: Conn, held: tuple[int, int, int]
) -> None:
    _worker, job, fence = held
    conn.execute("SELECT codity.start(%s, %s)", [job, fence])
    rows = conn.execute(
        "SELECT job_id, accepted, outcome::text FROM codity.complete_many("
        "ARRAY[%s, %s]::bigint[], ARRAY[%s, %s], ARRAY['{\"n\": 1}', '{\"n\": 2}']::jsonb[])",
        [job, job, fence, fence],
    ).fetchall()
    assert rows == [(job, True, "applied"), (job, True, "already_applied")]
    assert conn.execute(
        "SELECT status::text, result FROM codity.job_executions WHERE job_id = %s", [job]
    ).fetchall() == [("completed", {"n": 1})]
    assert _rejections(conn) == 0


def test_a_batch_naming_one_job_with_its_fence_and_a_stale_one_answers_each_alone(
    conn: Conn, held: tuple[int, int, int]
) -> None:
    _worker, job, fence = held
    conn.execute("SELECT codity.start(%s, %s)", [job, fence])
    rows = conn.execute(
        "SELECT accepted, outcome::text FROM codity.complete_many("
        "ARRAY[%s, %s]::bigint[], ARRAY[%s, %s])",
        [job, job, fence + 5, fence],
    ).fetchall()
    assert rows == [(False, "stale"), (True, "applied")]
    assert _rejections(conn) == 1
