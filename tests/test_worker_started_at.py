"""An attempt's ``started_at`` is when its handler began, also for a prefetched job.

Issue 29 item 7: a worker claims beyond its free slots (its prefetch) with ``p_start``,
so the claim recorded every job of the batch as started at the claim's time, although the
prefetched ones waited in memory for a slot. The worker now measures each job's wait on
its monotonic clock and reports it with the outcome (``p_waited_ms``), and the database
moves started_at on by it. With one slot and four 0.3 s jobs claimed at once, the four
attempts start 0.3 s apart, completed or failed alike; before, all four read the claim's
time.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import psycopg

from codity.worker import JobContext, NonRetryable, Registry
from tests.test_worker_runtime import _run_until, _setup, _statuses

HANDLER_S = 0.3


def test_prefetched_attempts_start_when_their_handlers_do(
    db_url: str, conn: psycopg.Connection
) -> None:
    _setup(conn, max_attempts=1)
    registry = Registry()

    @registry.task("slow.ok")
    async def slow_ok(payload: Any, ctx: JobContext) -> None:
        await asyncio.sleep(HANDLER_S)

    @registry.task("slow.fails")
    async def slow_fails(payload: Any, ctx: JobContext) -> None:
        await asyncio.sleep(HANDLER_S)
        raise NonRetryable("no")

    conn.execute(
        "SELECT codity.enqueue_many('work', %s)",
        [psycopg.types.json.Jsonb([{"task": "slow.ok"}, {"task": "slow.fails"}] * 2)],
    )

    def done() -> bool:
        statuses = _statuses(conn)
        return statuses.get("completed", 0) + statuses.get("dead_letter", 0) == 4

    asyncio.run(_run_until(db_url, registry, done, concurrency=1, prefetch=3))

    rows = conn.execute(
        "SELECT status::text, claimed_at, started_at, finished_at FROM codity.job_executions"
        " ORDER BY started_at"
    ).fetchall()
    assert sorted(r[0] for r in rows) == ["completed", "completed", "failed", "failed"]
    assert len({r[1] for r in rows}) == 1, "the four jobs were claimed in one call"
    for (_, _, earlier, _), (_, _, later, _) in itertools.pairwise(rows):
        gap = (later - earlier).total_seconds()
        # One slot: each handler began after the one before it had run its 0.3 s.
        assert gap >= HANDLER_S - 0.05, f"attempts started {gap:.3f} s apart"
    for _, claimed, started, finished in rows:
        assert claimed <= started <= finished
    jobs = conn.execute(
        "SELECT started_at FROM codity.jobs WHERE status = 'completed' ORDER BY started_at"
    ).fetchall()
    executions = [r[2] for r in rows if r[0] == "completed"]
    assert [r[0] for r in jobs] == executions, "a completed job's row agrees with its execution"
