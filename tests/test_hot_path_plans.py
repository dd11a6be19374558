"""What the hot path reads: a batch finds its own jobs, not every one its state holds.

Counted with the backend's own statistics for the open transaction
(``pg_stat_get_xact_tuples_returned`` of an index: the entries its scans returned), around one
call, on the shared database where other tests leave jobs of their own.
"""

from __future__ import annotations

from typing import Any

import psycopg

from tests.test_lifecycle import Api

RUNNING = 500


def _entries_read(conn: psycopg.Connection[Any]) -> dict[str, int]:
    rows = conn.execute(
        "SELECT i.indexrelid::regclass::text,"
        " pg_catalog.pg_stat_get_xact_tuples_returned(i.indexrelid)"
        " FROM pg_catalog.pg_index i WHERE i.indrelid = 'codity.jobs'::regclass"
    ).fetchall()
    return {name: int(n) for name, n in rows}


def test_a_completion_batch_reads_its_own_jobs_not_every_running_one(
    tx: psycopg.Connection,
) -> None:
    api = Api(tx)
    queue_id = api.queue("plans")
    worker = api.worker("plans")
    tx.execute(
        "SELECT count(*) FROM codity.enqueue_many('plans',"
        " (SELECT jsonb_agg(jsonb_build_object('task', 'noop')) FROM generate_series(1, %s)))",
        [RUNNING + 3],
    )
    held = tx.execute(
        "SELECT count(*) FROM codity.claim_in_queue(%s, %s, %s, p_start => true)",
        [queue_id, worker, RUNNING],
    ).fetchone()
    assert held == (RUNNING,)
    batch = tx.execute(
        "SELECT array_agg(job_id), array_agg(fence)"
        " FROM codity.claim_in_queue(%s, %s, 3, p_start => true)",
        [queue_id, worker],
    ).fetchone()
    assert batch is not None
    ids, fences = batch

    before = _entries_read(tx)
    refused = tx.execute(
        "SELECT * FROM codity.complete_many_in_queue(%s, %s, %s) WHERE outcome <> 'applied'",
        [queue_id, ids, fences],
    ).fetchall()
    after = _entries_read(tx)

    assert refused == []
    read = {name: after[name] - before[name] for name in after if after[name] > before[name]}
    # Three lookups by id; the answers read nothing more. Before the status became a plan
    # parameter, jobs_worker_idx returned every running job of the queue (503 here).
    assert "codity.jobs_worker_idx" not in read, read
    assert sum(read.values()) <= 6, read


def test_a_start_batch_reads_its_own_jobs_not_every_claimed_one(tx: psycopg.Connection) -> None:
    api = Api(tx)
    queue_id = api.queue("plans-start")
    worker = api.worker("plans-start")
    tx.execute(
        "SELECT count(*) FROM codity.enqueue_many('plans-start',"
        " (SELECT jsonb_agg(jsonb_build_object('task', 'noop')) FROM generate_series(1, %s)))",
        [RUNNING + 3],
    )
    tx.execute(
        "SELECT count(*) FROM codity.claim_in_queue(%s, %s, %s)", [queue_id, worker, RUNNING]
    )
    batch = tx.execute(
        "SELECT array_agg(job_id), array_agg(fence) FROM codity.claim_in_queue(%s, %s, 3)",
        [queue_id, worker],
    ).fetchone()
    assert batch is not None

    before = _entries_read(tx)
    refused = tx.execute(
        "SELECT * FROM codity.start_many_in_queue(%s, %s, %s) WHERE outcome <> 'applied'",
        [queue_id, *batch],
    ).fetchall()
    after = _entries_read(tx)

    assert refused == []
    read = {name: after[name] - before[name] for name in after if after[name] > before[name]}
    assert "codity.jobs_worker_idx" not in read, read
    assert sum(read.values()) <= 6, read
