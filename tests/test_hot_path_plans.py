"""What the hot path reads: index entries per call, on a queue with a history.

Counted with the backend's own statistics for the open transaction
(``pg_stat_get_xact_tuples_returned`` of each index of ``codity.jobs``: the entries its
scans returned) around one call, in a database of the test's own. The queue holds 3,000
jobs: 1,500 completed, 500 running, 1,000 queued; the table's statistics were taken
when it held 3 (``ANALYZE`` before the rest came), as after a burst that autovacuum has
not caught up with. DESIGN_DECISIONS 58 tells what each count means, and what PostgreSQL
15 did with a claim by id.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.test_lifecycle import Api

Conn = psycopg.Connection[Any]
RUNNING = 500
COMPLETED = 1_500
QUEUED = 1_000
BATCH = 3


def _entries_read(conn: Conn) -> dict[str, int]:
    rows = conn.execute(
        "SELECT i.indexrelid::regclass::text,"
        " pg_catalog.pg_stat_get_xact_tuples_returned(i.indexrelid)"
        " FROM pg_catalog.pg_index i WHERE i.indrelid = 'codity.jobs'::regclass"
    ).fetchall()
    return {name.removeprefix("codity."): int(n) for name, n in rows}


def _call(
    conn: Conn, query: str, params: list[Any]
) -> tuple[list[tuple[Any, ...]], dict[str, int]]:
    """The rows of one call and the index entries it read, in a transaction of its own."""
    with conn.transaction():
        before = _entries_read(conn)
        rows = conn.execute(query, params).fetchall()
        after = _entries_read(conn)
    return rows, {name: after[name] - before[name] for name in after if after[name] > before[name]}


@pytest.fixture
def history(conn: Conn, db_url: str) -> Any:
    """(queue id, worker id, a new connection): the queue above, its statistics stale."""
    api = Api(conn)
    queue_id = api.queue("history")
    worker = api.worker("history")

    def enqueue(count: int) -> None:
        conn.execute(
            "SELECT count(*) FROM codity.enqueue_many('history', (SELECT"
            " jsonb_agg(jsonb_build_object('task', 'noop')) FROM generate_series(1, %s)))",
            [count],
        )

    # Statistics stay as this test sets them: no autovacuum analyze of its own database
    # in between (fresh ones would hide the plan the claim test is about).
    conn.execute("ALTER TABLE codity.jobs SET (autovacuum_enabled = false)")
    enqueue(3)
    conn.execute("ANALYZE codity.jobs")
    enqueue(COMPLETED + RUNNING + QUEUED - 3)
    for _ in range(COMPLETED // RUNNING):  # a claim takes at most 1,000 jobs
        ids, fences = conn.execute(
            "SELECT array_agg(job_id), array_agg(fence)"
            " FROM codity.claim_in_queue(%s, %s, %s, p_start => true)",
            [queue_id, worker, RUNNING],
        ).fetchone() or (None, None)
        conn.execute(
            "SELECT count(*) FROM codity.complete_many_in_queue(%s, %s, %s)",
            [queue_id, ids, fences],
        )
    conn.execute(
        "SELECT count(*) FROM codity.claim_in_queue(%s, %s, %s, p_start => true)",
        [queue_id, worker, RUNNING],
    )
    # Vacuum takes out the index entries of versions the claims and completions left
    # behind, as a live system's autovacuum does; it leaves the column statistics alone.
    conn.execute("VACUUM codity.jobs")
    with psycopg.connect(db_url, autocommit=True) as fresh:
        yield queue_id, worker, fresh


def test_batches_read_at_most_the_jobs_their_queue_holds(history: Any) -> None:
    """start_many and complete_many read the queue's held jobs, never its history."""
    queue_id, worker, conn = history
    claimed, _ = _call(
        conn, "SELECT job_id, fence FROM codity.claim_in_queue(%s, %s, %s)",
        [queue_id, worker, BATCH],
    )  # fmt: skip
    ids, fences = [row[0] for row in claimed], [row[1] for row in claimed]
    for function in ("start_many_in_queue", "complete_many_in_queue"):
        outcomes, read = _call(
            conn, f"SELECT outcome::text FROM codity.{function}(%s, %s, %s)",
            [queue_id, ids, fences],
        )  # fmt: skip
        assert outcomes == [("applied",)] * BATCH, function
        # The planner finds the batch among the jobs the queue holds (a partial index):
        # the 500 running, this batch, and entries of the batch's own earlier versions;
        # never the queue's key range (3,000 jobs).
        assert sum(read.values()) <= RUNNING + 3 * BATCH, (function, read)


def test_a_claim_reads_the_jobs_it_claims_not_the_queue(history: Any) -> None:
    """By the ctids its pick locked: PostgreSQL 15 read the queue's primary-key range by id."""
    queue_id, worker, conn = history
    for _ in range(2):  # the first call makes the session's generic plan, the second uses it
        claimed, read = _call(
            conn, "SELECT job_id FROM codity.claim_in_queue(%s, %s, %s, p_start => true)",
            [queue_id, worker, BATCH],
        )  # fmt: skip
        assert len(claimed) == BATCH
        # The claim index from its front (entries of jobs just claimed included), and no
        # other index: the UPDATE is a Tid Scan of the rows the pick locked.
        assert set(read) == {"jobs_claim_idx"}, read
        assert read["jobs_claim_idx"] <= 2 * BATCH, read


@pytest.mark.parametrize("caller", ["on", "off"])
def test_a_claim_leaves_the_callers_scan_settings_as_they_were(history: Any, caller: str) -> None:
    """The body turns index scans off for its UPDATE; the caller's transaction never sees it."""
    queue_id, worker, conn = history
    settings = ("enable_indexscan", "enable_bitmapscan", "enable_tidscan")
    with conn.transaction():
        for name in settings:
            conn.execute("SELECT set_config(%s, %s, true)", [name, caller])
        claimed = conn.execute(
            "SELECT job_id FROM codity.claim_in_queue(%s, %s, %s)", [queue_id, worker, BATCH]
        ).fetchall()
        after = [conn.execute("SELECT current_setting(%s)", [n]).fetchone() for n in settings]
    assert len(claimed) == BATCH  # the pick had its index scan whatever the caller set
    assert after == [(caller,)] * len(settings)


def test_jobs_waiting_in_a_workflow_cost_the_claim_and_the_batches_nothing(
    history: Any,
) -> None:
    """Issue 27's zero cost for plain jobs: 19,998 workflow nodes waiting in the same queue
    (their root in another, unclaimed), all ahead of the queue's queued jobs by priority,
    and the claim still reads only the entries of the
    jobs it takes, the batch calls only the held jobs: 'waiting' is in neither partial
    index. Break it: put waiting into the claim index's predicate and the claim reads its
    way through them, 19,998 entries, to the first queued job."""
    queue_id, worker, conn = history
    conn.execute("SELECT codity.create_queue('roots')")
    nodes = [{"key": "root", "queue": "roots", "task": "root"}] + [
        {"key": f"n{i}", "queue": "history", "task": "noop", "priority": 1000, "after": ["root"]}
        for i in range(9_999)
    ]
    waiting = 0
    for _ in range(2):  # a workflow holds at most 10,000 nodes
        found = conn.execute(
            "SELECT count(*) FILTER (WHERE job_status = 'waiting')"
            " FROM codity.enqueue_workflow(%s)",
            [Jsonb({"nodes": nodes})],
        ).fetchone()
        waiting += found[0] if found else 0
    assert waiting == 19_998
    for _ in range(2):
        claimed, read = _call(
            conn, "SELECT job_id, fence FROM codity.claim_in_queue(%s, %s, %s, p_start => true)",
            [queue_id, worker, BATCH],
        )  # fmt: skip
        assert len(claimed) == BATCH
        assert set(read) == {"jobs_claim_idx"} and read["jobs_claim_idx"] <= 2 * BATCH, read
    outcomes, read = _call(
        conn, "SELECT outcome::text FROM codity.complete_many_in_queue(%s, %s, %s)",
        [queue_id, [r[0] for r in claimed], [r[1] for r in claimed]],
    )  # fmt: skip
    assert outcomes == [("applied",)] * BATCH
    assert sum(read.values()) <= RUNNING + 4 * BATCH, read
