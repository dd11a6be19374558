"""Which of the worker's writes wait for their WAL to reach disk (DESIGN_DECISIONS 44).

A claim must be durable: a claim lost to a crash after the worker started its job would let
another worker claim the same attempt again under the same fence. A completion need not:
one lost leaves its job running under its fence, the reaper requeues it, and it runs once
more, which at-least-once allows. So the worker's completion statement turns
synchronous_commit off for its own transaction only, and its claim leaves it alone. The
session here asks for synchronous_commit on (the test server runs with it off), so each
statement's effect shows in SHOW.
"""

from __future__ import annotations

import psycopg

from codity.worker.claim import CLAIM_AND_START
from codity.worker.reporter import COMPLETE_MANY
from tests.sqlapi import create_queue


def _setting(conn: psycopg.Connection) -> str:
    return str(conn.execute("SHOW synchronous_commit").fetchall()[0][0])


def test_the_claim_waits_for_its_wal_and_the_completion_batch_does_not(
    conn: psycopg.Connection,
) -> None:
    conn.autocommit = False  # each step's transaction ends where the test says
    create_queue(conn, "work")
    conn.execute("SELECT codity.enqueue('work', 'noop')")
    worker = conn.execute("SELECT codity.register_worker('w', ARRAY['work'])").fetchall()[0][0]
    conn.commit()
    conn.execute("SET synchronous_commit = on")
    conn.commit()

    queue_id = conn.execute("SELECT queue_id FROM codity.worker_queues(%s)", [worker]).fetchall()[
        0
    ][0]
    rows = conn.execute(
        CLAIM_AND_START, {"worker": worker, "queue_id": queue_id, "limit": 10, "suspects": True}
    ).fetchall()
    assert len(rows) == 1
    assert _setting(conn) == "on", "the claim must stay durable"
    conn.commit()
    job_id, fence = rows[0][0], rows[0][1]

    outcomes = conn.execute(COMPLETE_MANY, [queue_id, [job_id], [fence], [None]]).fetchall()
    assert [row[2] for row in outcomes] == ["applied"]
    assert _setting(conn) == "off", "the completion batch commits without waiting for its WAL"
    conn.commit()
    assert _setting(conn) == "on", "only the completion's own transaction is relaxed"
    assert conn.execute("SELECT status::text FROM codity.jobs").fetchall() == [("completed",)]
