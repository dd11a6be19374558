"""A worker serving several queues shares its room: a trickle is served while a backlog drains.

Issue 26, as found from outside: two workers on ``--queue bulk --queue trickle``, 50,000 jobs
in bulk, 10 a second into trickle: not one trickle job began before the last bulk job was
claimed. Here the same, smaller and in one process: one worker (concurrency 10, the
default prefetch), 10,000 bulk jobs of 10 ms, then 10 trickle jobs 0.1 s apart while bulk drains,
with the queues given in either order. Every trickle job must begin within 1 s of its
enqueue, and before bulk has drained (or the test proves nothing). One worker, because two
make it pass by luck now and then: a claim that races another worker's over the same rows
comes back short (SKIP LOCKED), and only then did the old loop go on to the next queue; and
10 ms of work per bulk job for the same reason (no-op jobs free slots during each claim).
Break it: put back the loop that claims the queues in order, each taking all the room —
the trickle queue is never asked while bulk has a backlog.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from codity.worker import JobContext, Registry, Worker, WorkerConfig
from tests.sqlapi import create_queue, one
from tests.worker_runs import run_worker_until

BULK = 10_000
TRICKLE = 10


@pytest.mark.parametrize("order", [("bulk", "trickle"), ("trickle", "bulk")])
def test_a_trickle_is_served_within_a_second_while_another_queue_drains(
    db_url: str, conn: psycopg.Connection, order: tuple[str, str]
) -> None:
    create_queue(conn, "bulk")
    create_queue(conn, "trickle")
    conn.execute("SELECT codity.enqueue_many('bulk', %s)", [Jsonb([{"task": "bulk"}] * BULK)])
    began: dict[int, float] = {}  # trickle job id: when its handler began (wall clock)
    bulk_done = [0]
    last_bulk = [0.0]
    registry = Registry()

    @registry.task("bulk")
    async def bulk(payload: Any, ctx: JobContext) -> None:
        await asyncio.sleep(0.01)  # some work: else slots free up during each claim
        bulk_done[0] += 1
        last_bulk[0] = time.time()

    @registry.task("trickle")
    async def trickle(payload: Any, ctx: JobContext) -> None:
        began[ctx.job_id] = time.time()

    async def scenario() -> dict[int, float]:
        stop = asyncio.Event()
        config = WorkerConfig(queues=order, concurrency=10, heartbeat_s=1.0, poll_s=1.0)
        workers = [asyncio.create_task(Worker(db_url, registry, config).run(stop))]
        try:
            while bulk_done[0] < 500:  # draining
                assert time.monotonic() < deadline and not any(w.done() for w in workers)
                await asyncio.sleep(0.01)
            enqueued: dict[int, float] = {}
            for _ in range(TRICKLE):
                enqueued[one(conn, "SELECT job_id FROM codity.enqueue('trickle', 'trickle')")] = (
                    time.time()
                )
                await asyncio.sleep(0.1)
            while len(began) < TRICKLE:
                assert time.monotonic() < deadline and not any(w.done() for w in workers)
                await asyncio.sleep(0.01)
            return enqueued
        finally:
            stop.set()
            await asyncio.wait_for(asyncio.gather(*workers), 30)

    deadline = time.monotonic() + 120
    enqueued = asyncio.run(scenario())
    pickups = sorted(began[job] - at for job, at in enqueued.items())
    print(f"order {order}: trickle pickup max {pickups[-1]:.3f}s, bulk done {bulk_done[0]}")
    assert max(began.values()) < last_bulk[0], "bulk drained before the trickle was served"
    assert pickups[-1] <= 1.0, pickups


def test_weights_share_the_room_in_proportion(db_url: str, conn: psycopg.Connection) -> None:
    """Two queues with backlogs, weights 3 and 1 (queues.weight, read by the worker from
    codity.worker_queues): one worker of 12 slots runs about three jobs of the first for
    each of the second while both have work. Break it: ignore the weights (every queue 1)
    and the two run one for one."""
    create_queue(conn, "heavy", weight=3)
    create_queue(conn, "light")
    for queue in ("heavy", "light"):
        conn.execute("SELECT codity.enqueue_many(%s, %s)", [queue, Jsonb([{"task": "w"}] * 3000)])
    done = {"heavy": 0, "light": 0}
    registry = Registry()

    @registry.task("w")
    async def work(payload: Any, ctx: JobContext) -> None:
        await asyncio.sleep(0.01)
        done[ctx.queue] += 1

    config = WorkerConfig(queues=("light", "heavy"), concurrency=12, heartbeat_s=1.0)
    # Until 2,000 have run: both queues still have a backlog.
    run_worker_until(db_url, registry, config, lambda: done["heavy"] + done["light"] >= 2000)
    ratio = done["heavy"] / max(1, done["light"])
    print(f"weights 3:1 ran {done}: {ratio:.2f}")
    assert 2.2 <= ratio <= 4.0, done


def test_a_weight_out_of_range_is_refused_and_changes_nothing(conn: psycopg.Connection) -> None:
    create_queue(conn, "weighed", weight=5)
    for bad in (0, 1001, -1):
        with pytest.raises(psycopg.Error) as caught:
            create_queue(conn, "weighed", weight=bad)
        assert caught.value.sqlstate == "CD010", caught.value
        assert f"weight must be from 1 to 1000, got {bad}" in str(caught.value)
        if not conn.autocommit:
            conn.rollback()
    assert one(conn, "SELECT weight FROM codity.queues WHERE name = 'weighed'") == 5
    create_queue(conn, "weighed", max_attempts=4)  # left out: kept
    assert one(conn, "SELECT weight FROM codity.queues WHERE name = 'weighed'") == 5


def test_priorities_inside_a_queue_keep_their_meaning_while_queues_share(
    db_url: str, conn: psycopg.Connection
) -> None:
    """Two backlogged queues sharing one worker: within ``ranked``, its 20 jobs of priority
    10, enqueued after its 200 of priority 0, are the first 20 of it to begin. The share
    decides how many jobs a claim of the queue asks for; the claim takes them in the queue's
    order (priority, then run_at, then id). Break it: order the claim by id alone and the
    first 20 to begin are priority 0."""
    create_queue(conn, "ranked")
    create_queue(conn, "other")
    conn.execute("SELECT codity.enqueue_many('other', %s)", [Jsonb([{"task": "w"}] * 500)])
    conn.execute("SELECT codity.enqueue_many('ranked', %s)", [Jsonb([{"task": "w"}] * 200)])
    conn.execute(
        "SELECT codity.enqueue_many('ranked', %s)", [Jsonb([{"task": "w", "priority": 10}] * 20)]
    )
    high = {
        r[0]
        for r in conn.execute(
            "SELECT id FROM codity.jobs WHERE priority = 10 AND queue_id ="
            " (SELECT id FROM codity.queues WHERE name = 'ranked')"
        ).fetchall()
    }
    order: list[int] = []
    registry = Registry()

    @registry.task("w")
    async def work(payload: Any, ctx: JobContext) -> None:
        if ctx.queue == "ranked":
            order.append(ctx.job_id)
        await asyncio.sleep(0.005)

    config = WorkerConfig(queues=("other", "ranked"), concurrency=4, heartbeat_s=1.0)
    run_worker_until(db_url, registry, config, lambda: len(order) >= 40)
    assert set(order[:20]) == high, order[:40]


def test_queues_with_backlogs_take_turns_with_whole_claims(
    db_url: str, conn: psycopg.Connection
) -> None:
    """Eight queues with backlogs, one worker of 10 slots (prefetch 30: it claims once 20
    places are free). Each claim call is one transaction, so its jobs share one
    ``claimed_at``: while all eight have work, the claims average at least 15 jobs, and each
    queue still gets its eighth of the work. Break it: ask every queue for its share each
    round (no ``Credits``) and the claims average about 7 jobs."""
    names = [f"turn-{i}" for i in range(8)]
    for name in names:
        create_queue(conn, name)
        conn.execute("SELECT codity.enqueue_many(%s, %s)", [name, Jsonb([{"task": "n"}] * 600)])
    done = dict.fromkeys(names, 0)
    registry = Registry()

    @registry.task("n")
    async def noop(payload: Any, ctx: JobContext) -> None:
        done[ctx.queue] += 1

    config = WorkerConfig(queues=tuple(names), concurrency=10, heartbeat_s=1.0)
    run_worker_until(db_url, registry, config, lambda: sum(done.values()) >= 3000)
    counted = conn.execute(
        "SELECT count(DISTINCT (e.queue_id, e.claimed_at)), count(*)"
        " FROM codity.job_executions e JOIN codity.queues q ON q.id = e.queue_id"
        " WHERE q.name LIKE 'turn-%%'"
    ).fetchone()
    assert counted is not None
    claims, jobs = counted
    print(f"{jobs} jobs in {claims} claims ({jobs / claims:.1f} per claim); by queue {done}")
    assert jobs / claims >= 15, (jobs, claims)
    assert all(250 <= n <= 500 for n in done.values()), done
