"""The reporter gathers completions into batches: up to LINGER_S, or until a batch's worth.

Against a real database: jobs claimed for a registered worker, completed through the
reporter's own calls, each call recorded on its way to the server (DESIGN_DECISIONS 59).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg
from psycopg.rows import dict_row

from codity.worker.context import JobContext
from codity.worker.reporter import COMPLETE_MANY, Reporter
from tests.sqlapi import create_queue

LINGER_S = 0.5


def _claimed(conn: psycopg.Connection, jobs: int) -> list[JobContext]:
    queue_id = create_queue(conn, "batched")
    worker = conn.execute("SELECT codity.register_worker('rb', ARRAY['batched'])").fetchone()
    assert worker is not None
    conn.execute(
        "SELECT codity.enqueue_many('batched', %s)",
        [psycopg.types.json.Jsonb([{"task": "t"} for _ in range(jobs)])],
    )
    rows = conn.execute(
        "SELECT job_id, attempt, fence, max_attempts"
        " FROM codity.claim_in_queue(%s, %s, %s, p_start => true)",
        [queue_id, worker[0], jobs],
    ).fetchall()
    return [JobContext(r[0], r[1], r[2], "batched", queue_id, "t", r[3]) for r in rows]


def test_completions_wait_for_a_batch_or_the_linger_and_none_wait_once_draining(
    db_url: str, conn: psycopg.Connection
) -> None:
    jobs = _claimed(conn, 13)
    sent: list[int] = []

    async def scenario() -> list[float]:
        async with await psycopg.AsyncConnection.connect(
            db_url, autocommit=True, row_factory=dict_row
        ) as aconn:

            async def call(
                query: str, params: list[Any], *, queue_id: int | None = None
            ) -> list[dict[str, Any]]:
                if query == COMPLETE_MANY:
                    sent.append(len(params[1]))
                return await (await aconn.execute(query, params)).fetchall()

            reporter = Reporter(call, batch=10, linger_s=LINGER_S)
            loop = asyncio.create_task(reporter.run())
            waited = []

            for ctx in jobs[:3]:
                reporter.complete(ctx, None)
            await asyncio.sleep(0.1)
            assert sent == [], "3 of a batch of 10 were sent before the linger ran out"
            for ctx in jobs[3:10]:  # the batch fills: it goes at once
                reporter.complete(ctx, None)
            assert await reporter.wait_idle(timeout=LINGER_S / 2)
            assert sent == [10]

            started = time.monotonic()
            reporter.complete(jobs[10], None)  # alone: it goes when the linger runs out
            assert await reporter.wait_idle(timeout=5)
            waited.append(time.monotonic() - started)
            assert sent == [10, 1]

            reporter.hurry()  # draining: nothing waits
            started = time.monotonic()
            for ctx in jobs[11:]:
                reporter.complete(ctx, None)
            assert await reporter.wait_idle(timeout=LINGER_S / 2)
            waited.append(time.monotonic() - started)
            loop.cancel()
            return waited

    alone, draining = asyncio.run(scenario())
    assert sent == [10, 1, 2]
    assert alone >= LINGER_S * 0.9
    assert draining < LINGER_S / 2
    done = conn.execute(
        "SELECT count(*) FROM codity.jobs WHERE id = ANY (%s) AND status = 'completed'",
        [[c.job_id for c in jobs]],
    ).fetchone()
    assert done == (13,)
