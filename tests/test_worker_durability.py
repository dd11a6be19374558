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

import time

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

    outcomes = conn.execute(COMPLETE_MANY, [queue_id, [job_id], [fence], [None], None]).fetchall()
    assert [row[2] for row in outcomes] == ["applied"]
    assert _setting(conn) == "off", "the completion batch commits without waiting for its WAL"
    conn.commit()
    assert _setting(conn) == "on", "only the completion's own transaction is relaxed"
    assert conn.execute("SELECT status::text FROM codity.jobs").fetchall() == [("completed",)]


def test_with_a_synchronous_standby_asked_for_the_completion_batch_waits_like_any_commit(
    db_url: str, conn: psycopg.Connection
) -> None:
    """A failover pair (synchronous_standby_names set) loses no acknowledged completion:
    the batch keeps the session's synchronous_commit (issue 25: without this, a kill -9 of
    a pg_auto_failover primary lost 10-50 acknowledged completions, and their jobs ran
    again). The setting is the server's, so the batch runs in a transaction that is rolled
    back, and the setting is taken back before anything else commits: no commit waits for
    a standby that does not exist."""
    create_queue(conn, "work")
    conn.execute("SELECT codity.enqueue('work', 'noop')")
    worker = conn.execute("SELECT codity.register_worker('w', ARRAY['work'])").fetchall()[0][0]
    queue_id = conn.execute("SELECT queue_id FROM codity.worker_queues(%s)", [worker]).fetchall()[
        0
    ][0]
    rows = conn.execute(
        CLAIM_AND_START, {"worker": worker, "queue_id": queue_id, "limit": 1, "suspects": True}
    ).fetchall()
    job_id, fence = rows[0][0], rows[0][1]

    def standby_names(value: str) -> None:
        with psycopg.connect(db_url, autocommit=True) as admin:
            if value:
                admin.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{value}'")
            else:
                admin.execute("ALTER SYSTEM RESET synchronous_standby_names")
            admin.execute("SELECT pg_reload_conf()")
        for _ in range(100):  # the reload reaches this session at its next statement
            shown = conn.execute("SHOW synchronous_standby_names").fetchall()[0][0]
            if shown == value:
                return
            time.sleep(0.02)
        raise AssertionError(f"synchronous_standby_names is still {shown!r}")

    conn.autocommit = False
    conn.execute("SET synchronous_commit = on")
    conn.commit()
    standby_names("codity_test_standby")
    try:
        outcomes = conn.execute(
            COMPLETE_MANY, [queue_id, [job_id], [fence], [None], None]
        ).fetchall()
        assert [row[2] for row in outcomes] == ["applied"]
        assert _setting(conn) == "on", "with a synchronous standby, the batch must wait for it"
        conn.rollback()
    finally:
        conn.rollback()
        standby_names("")
    outcomes = conn.execute(COMPLETE_MANY, [queue_id, [job_id], [fence], [None], None]).fetchall()
    assert _setting(conn) == "off", "without one, the batch is relaxed again"
    conn.commit()
