"""A busy worker leaves a queue it found empty alone until notified (worker.empty_queues).

Against a real database, the worker in-process. The claims are counted as the worker sends
them (a spy on the method that sends each call; every call still goes to the database).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from codity.worker import JobContext, Registry, Worker, WorkerConfig
from codity.worker.claim import CLAIM_AND_START
from codity.worker.empty_queues import EmptyQueues
from tests.sqlapi import create_queue


def _config(concurrency: int) -> WorkerConfig:
    """Serving the empty queue first. A long poll: within a test every mark is dropped by
    a notification, never by the poll."""
    return WorkerConfig(queues=("dry", "work"), concurrency=concurrency, prefetch=concurrency,
                        heartbeat_s=0.5, poll_s=30.0, grace_s=2.0)  # fmt: skip


def _spied(worker: Worker) -> Counter[int]:
    """Claims the worker sends, by queue id."""
    sent: Counter[int] = Counter()
    call_typed = worker._call_typed

    async def spy(query: str, params: Any, *args: Any, **kwargs: Any) -> Any:
        if query is CLAIM_AND_START:
            sent[params["queue_id"]] += 1
        return await call_typed(query, params, *args, **kwargs)

    worker._call_typed = spy  # type: ignore[method-assign]
    return sent


def _registry(done: list[str], delay_s: float) -> Registry:
    registry = Registry()

    @registry.task("step")
    async def step(payload: Any, ctx: JobContext) -> None:
        await asyncio.sleep(delay_s)
        done.append(ctx.queue)

    return registry


def test_a_busy_worker_does_not_claim_again_from_a_queue_it_found_empty(
    db_url: str, conn: psycopg.Connection
) -> None:
    """Listed first, an empty queue would be asked at every turn of the claim loop."""
    dry = create_queue(conn, "dry")
    work = create_queue(conn, "work")
    conn.execute("SELECT codity.enqueue_many('work', %s)", [Jsonb([{"task": "step"}] * 400)])
    done: list[str] = []

    async def scenario() -> Counter[int]:
        stop = asyncio.Event()
        worker = Worker(db_url, _registry(done, 0.002), _config(4))
        sent = _spied(worker)
        runner = asyncio.create_task(worker.run(stop))
        deadline = time.monotonic() + 60
        while len(done) < 400:
            assert time.monotonic() < deadline, f"{len(done)} of 400 done"
            assert not runner.done(), runner
            await asyncio.sleep(0.02)
        stop.set()
        await asyncio.wait_for(runner, 15)
        return sent

    sent = asyncio.run(scenario())
    assert sent[work] >= 40, sent  # claims of at most 8 jobs: the worker was busy throughout
    # The first claim found it empty; one more when the listener connected (a connect drops
    # every mark), and one when the worker was idle at the end (a mark made by a busy
    # worker does not cover an idle one's claim, which takes suspects).
    assert sent[dry] <= 3, f"{sent[dry]} claims on the empty queue against {sent[work]}"


def test_a_notification_brings_a_queue_marked_empty_back_at_once(
    db_url: str, conn: psycopg.Connection
) -> None:
    """The job enqueued in the empty queue runs while the other queue is still draining,
    long before the 30 s poll."""
    dry = create_queue(conn, "dry")
    create_queue(conn, "work")
    conn.execute("SELECT codity.enqueue_many('work', %s)", [Jsonb([{"task": "step"}] * 300)])
    done: list[str] = []

    async def scenario() -> int:
        stop = asyncio.Event()
        worker = Worker(db_url, _registry(done, 0.01), _config(2))
        sent = _spied(worker)
        runner = asyncio.create_task(worker.run(stop))
        deadline = time.monotonic() + 60
        while sent[dry] < 1 or len(done) < 20:  # marked empty, and busy on "work"
            assert time.monotonic() < deadline and not runner.done(), (sent, len(done))
            await asyncio.sleep(0.01)
        conn.execute("SELECT codity.enqueue('dry', 'step')")
        while "dry" not in done:
            assert time.monotonic() < deadline and not runner.done(), (sent, len(done))
            await asyncio.sleep(0.01)
        work_done = done.count("work")
        stop.set()
        await asyncio.wait_for(runner, 15)
        return work_done

    work_done = asyncio.run(scenario())
    assert work_done < 300, "the empty queue's job waited until the other queue had drained"


def test_a_mark_is_refused_when_the_queue_was_notified_while_its_claim_was_in_flight() -> None:
    """The notified job may have committed after the claim's snapshot: marking the queue
    empty then would leave it waiting for the poll."""
    empty = EmptyQueues(ttl_s=5.0)
    sent_at = empty.before_claim()
    empty.heard(7)  # arrives before the (empty) answer
    empty.mark(7, suspects=True, since=sent_at)
    assert not empty.skip(7, suspects=True)
    sent_at = empty.before_claim()
    empty.heard_payload("not a queue id")  # unreadable: any queue
    empty.mark(7, suspects=True, since=sent_at)
    assert not empty.skip(7, suspects=True)
    sent_at = empty.before_claim()
    empty.heard(8)  # another queue's notification does not count
    empty.mark(7, suspects=True, since=sent_at)
    assert empty.skip(7, suspects=True)


def test_marks_expire_cover_only_what_their_claim_took_and_need_a_listener() -> None:
    now = [100.0]
    empty = EmptyQueues(ttl_s=5.0, clock=lambda: now[0])
    empty.mark(1, suspects=False, since=empty.before_claim())  # a busy worker's claim
    assert empty.skip(1, suspects=False)
    assert not empty.skip(1, suspects=True), "an idle worker may take a suspect there"
    empty.mark(2, suspects=True, since=empty.before_claim())
    assert empty.skip(2, suspects=False) and empty.skip(2, suspects=True)
    now[0] += 5.0
    assert not empty.skip(2, suspects=True), "a mark holds one poll interval at most"
    empty.mark(3, suspects=True, since=empty.before_claim())
    empty.heard(None)  # the listener reconnected, or the poll came round
    assert not empty.skip(3, suspects=True)
    deaf = EmptyQueues(ttl_s=0.0)  # a worker with --no-listen: nothing would undo a mark
    deaf.mark(1, suspects=True, since=deaf.before_claim())
    assert not deaf.skip(1, suspects=True)
