"""The worker resolves a call whose answer was lost after it committed (docs/CONCURRENCY.md).

A proxy between the worker and PostgreSQL (tests/pgproxy.py) lets the server run and commit
a ``complete_many`` or a ``fail``, then swallows the answer and drops the connection. The
worker sees a transient error, reconnects and sends the same call again; the database
answers ``already_applied`` for it. The job ends as it should, exactly once, and no fence
rejection is logged: a lost answer is not mistaken for a zombie worker.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from codity.worker import JobContext, Registry
from tests.pgproxy import running_proxy
from tests.test_worker_runtime import _run_until, _setup, _statuses


def _registry() -> Registry:
    registry = Registry()

    @registry.task("ok")
    async def ok(payload: Any, ctx: JobContext) -> dict[str, int]:
        return {"n": payload["n"]}

    @registry.task("boom")
    async def boom(payload: Any, ctx: JobContext) -> None:
        raise RuntimeError("boom")

    return registry


def test_a_lost_completion_answer_is_resent_and_answered_already_applied(
    db_url: str, conn: psycopg.Connection, caplog: pytest.LogCaptureFixture
) -> None:
    _setup(conn)
    conn.execute(
        "SELECT codity.enqueue_many('work', %s)",
        [Jsonb([{"task": "ok", "payload": {"n": i}} for i in range(5)])],
    )
    with running_proxy(db_url) as proxy:
        proxy.cut_after(b"complete_many")
        caplog.set_level(logging.INFO, logger="codity")
        asyncio.run(
            _run_until(
                proxy.url(db_url),
                _registry(),
                lambda: _statuses(conn).get("completed", 0) == 5,
            )
        )
        assert proxy.cuts == 1, "one completion's answer was lost on the way back"

    assert conn.execute(
        "SELECT count(*), count(DISTINCT job_id) FROM codity.job_executions"
        " WHERE status = 'completed'"
    ).fetchone() == (5, 5)
    assert conn.execute("SELECT count(*) FROM codity.fence_rejections").fetchone() == (0,)
    assert conn.execute(
        "SELECT array_agg((result ->> 'n')::int ORDER BY (result ->> 'n')::int)"
        " FROM codity.job_executions"
    ).fetchone() == ([0, 1, 2, 3, 4],)
    messages = [r.getMessage() for r in caplog.records]
    assert any("reporting" in m and "failed" in m for m in messages), messages
    assert not any("refused" in m for m in messages), messages
    assert any("had landed" in m for m in messages), messages


def test_a_lost_failure_answer_is_resent_and_charges_one_attempt(
    db_url: str, conn: psycopg.Connection, caplog: pytest.LogCaptureFixture
) -> None:
    _setup(conn, max_attempts=3)
    conn.execute("SELECT codity.enqueue('work', 'boom')")
    with running_proxy(db_url) as proxy:
        proxy.cut_after(b"codity.fail_in_queue(")
        caplog.set_level(logging.INFO, logger="codity")
        asyncio.run(
            _run_until(
                proxy.url(db_url),
                _registry(),
                lambda: (
                    conn.execute(
                        "SELECT count(*) FROM codity.job_executions WHERE status = 'failed'"
                    ).fetchone()
                    == (1,)
                ),
            )
        )
        assert proxy.cuts == 1

    # One failure recorded, one attempt charged, the retry scheduled once.
    assert conn.execute(
        "SELECT status::text, attempt, execution_seq FROM codity.jobs"
    ).fetchone() in {("scheduled", 1, 1), ("queued", 1, 1)}
    assert conn.execute("SELECT count(*) FROM codity.fence_rejections").fetchone() == (0,)
    messages = [r.getMessage() for r in caplog.records]
    assert not any("refused" in m for m in messages), messages
    assert any("had landed" in m for m in messages), messages


def test_the_jobs_of_a_claim_whose_answer_was_lost_are_given_back_at_once(
    db_url: str, conn: psycopg.Connection, caplog: pytest.LogCaptureFixture
) -> None:
    """The claim commits, its answer is lost: the database holds the jobs under a worker
    that never heard of them. Before its next claim the worker gives them back
    (codity.release_lost_claims_in_queue), attempt not charged, and runs them — instead of
    their waiting out the lease (30 s here; no reaper runs at all) and being charged a
    crash. Break it: skip the call, and the jobs stay claimed until this test times out."""
    _setup(conn)
    conn.execute(
        "SELECT codity.enqueue_many('work', %s)",
        [Jsonb([{"task": "ok", "payload": {"n": i}} for i in range(3)])],
    )
    with running_proxy(db_url) as proxy:
        proxy.cut_after(b"claim_in_queue(")
        caplog.set_level(logging.INFO, logger="codity")
        asyncio.run(
            _run_until(
                proxy.url(db_url),
                _registry(),
                lambda: _statuses(conn).get("completed", 0) == 3,
                timeout=10,
            )
        )
        assert proxy.cuts == 1, "one claim's answer was lost on the way back"

    executions = conn.execute(
        "SELECT status::text, attempt_refunded, count(*) FROM codity.job_executions"
        " GROUP BY 1, 2 ORDER BY 1"
    ).fetchall()
    assert executions == [("completed", False, 3), ("released", True, 3)], executions
    crashes_and_attempts = "SELECT sum(crash_count), max(attempt) FROM codity.jobs"
    assert conn.execute(crashes_and_attempts).fetchone() == (0, 1)
    messages = [r.getMessage() for r in caplog.records]
    assert any("claimed by a call whose answer was lost" in m for m in messages), messages
