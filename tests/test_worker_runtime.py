"""The worker runtime against a real database, in-process: claims, runs, reports, drains."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from codity.worker import JobContext, NonRetryable, Registry, Worker, WorkerConfig
from tests.sqlapi import NO_BACKOFF, create_queue

FAST = {"heartbeat_s": 0.2, "poll_s": 0.5, "grace_s": 2.0}


def _setup(conn: psycopg.Connection, max_attempts: int = 2) -> None:
    """Queue ``work``, retried at once. (tests/test_worker_faults.py and
    tests/test_worker_lost_answers.py import it under this name.)"""
    create_queue(conn, "work", max_attempts=max_attempts, **NO_BACKOFF)


def _statuses(conn: psycopg.Connection) -> dict[str, int]:
    rows = conn.execute("SELECT status::text, count(*) FROM codity.jobs GROUP BY 1").fetchall()
    return {status: count for status, count in rows}


async def _run_until(
    db_url: str, registry: Registry, done: Callable[[], bool], *, timeout: float = 20, **config: Any
) -> None:
    stop = asyncio.Event()
    worker = Worker(db_url, registry, WorkerConfig(queues=("work",), **(FAST | config)))
    runner = asyncio.create_task(worker.run(stop))
    deadline = asyncio.get_running_loop().time() + timeout
    while not done():
        assert asyncio.get_running_loop().time() < deadline, "worker did not finish in time"
        assert not runner.done(), f"worker stopped early: {runner.exception()}"
        await asyncio.sleep(0.05)
    stop.set()
    await asyncio.wait_for(runner, timeout=10)


def test_worker_runs_sync_and_async_handlers_and_reports_outcomes(
    db_url: str, conn: psycopg.Connection
) -> None:
    _setup(conn)
    registry = Registry()
    seen: list[tuple[str, int]] = []

    @registry.task("ok.async")
    async def ok_async(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
        seen.append(("async", ctx.job_id))
        return {"double": payload["n"] * 2}

    @registry.task("ok.sync")
    def ok_sync(payload: dict[str, Any], ctx: JobContext) -> None:
        seen.append(("sync", ctx.job_id))

    @registry.task("always.fails")
    async def always_fails(payload: Any, ctx: JobContext) -> None:
        raise RuntimeError("boom")

    @registry.task("never.retry")
    async def never_retry(payload: Any, ctx: JobContext) -> None:
        raise NonRetryable("bad input")

    conn.execute(
        "SELECT codity.enqueue_many('work', %s)",
        [
            psycopg.types.json.Jsonb(
                [{"task": "ok.async", "payload": {"n": i}} for i in range(20)]
                + [{"task": "ok.sync"} for _ in range(5)]
                + [{"task": "always.fails"}, {"task": "never.retry"}]
            )
        ],
    )

    def done() -> bool:
        conn.execute("SELECT codity.promote()")
        s = _statuses(conn)
        return s.get("completed", 0) == 25 and s.get("dead_letter", 0) == 2

    asyncio.run(_run_until(db_url, registry, done))

    assert len(seen) == 25
    reasons: dict[str, str] = dict(
        conn.execute("SELECT task, reason FROM codity.dead_letters").fetchall()
    )
    assert reasons == {
        "always.fails": "failed: max attempts reached (2/2)",
        "never.retry": "failed: not retryable",
    }
    result = conn.execute(
        "SELECT x.result FROM codity.job_executions x JOIN codity.jobs j ON j.id = x.job_id "
        "WHERE j.task = 'ok.async' AND j.payload = '{\"n\": 4}'"
    ).fetchone()
    assert result == ({"double": 8},)
    errors = conn.execute(
        "SELECT x.error FROM codity.job_executions x JOIN codity.jobs j ON j.id = x.job_id "
        "WHERE j.task = 'always.fails' ORDER BY x.execution_seq"
    ).fetchall()
    assert errors == [("RuntimeError: boom",), ("RuntimeError: boom",)]
    # Deregistered on the way out.
    assert conn.execute("SELECT status::text FROM codity.workers").fetchall() == [("stopped",)]


def test_drain_releases_unfinished_jobs_without_charging_attempts(
    db_url: str, conn: psycopg.Connection
) -> None:
    _setup(conn)
    registry = Registry()
    started = 0

    @registry.task("slow")
    async def slow(payload: Any, ctx: JobContext) -> None:
        nonlocal started
        started += 1
        await asyncio.sleep(60)

    conn.execute(
        "SELECT codity.enqueue_many('work', %s)",
        [psycopg.types.json.Jsonb([{"task": "slow"} for _ in range(3)])],
    )
    asyncio.run(_run_until(db_url, registry, lambda: started == 3, grace_s=0.3))

    rows = conn.execute("SELECT status::text, attempt FROM codity.jobs").fetchall()
    assert rows == [("queued", 0)] * 3
    executions = conn.execute(
        "SELECT status::text, attempt_refunded FROM codity.job_executions"
    ).fetchall()
    assert executions == [("released", True)] * 3


def test_cancelled_job_is_told_and_its_result_discarded(
    db_url: str, conn: psycopg.Connection
) -> None:
    _setup(conn)
    registry = Registry()
    observed: list[bool] = []

    @registry.task("cancellable")
    async def cancellable(payload: Any, ctx: JobContext) -> dict[str, bool]:
        conn.execute("SELECT codity.cancel(%s)", [ctx.job_id])
        await asyncio.wait_for(ctx.cancelled.wait(), timeout=10)
        observed.append(ctx.is_cancelled)
        return {"late": True}

    conn.execute("SELECT codity.enqueue('work', 'cancellable')")
    asyncio.run(_run_until(db_url, registry, lambda: observed == [True]))

    assert _statuses(conn) == {"cancelled": 1}
    assert conn.execute("SELECT status::text, result FROM codity.job_executions").fetchall() == [
        ("cancelled", None)
    ]
    assert conn.execute("SELECT count(*) FROM codity.fence_rejections").fetchone() == (0,)


@pytest.mark.parametrize("listen", [True, False])
def test_idle_worker_picks_up_new_job(db_url: str, conn: psycopg.Connection, listen: bool) -> None:
    _setup(conn)
    registry = Registry()
    done: list[int] = []

    @registry.task("ping")
    async def ping(payload: Any, ctx: JobContext) -> None:
        done.append(ctx.job_id)

    async def scenario() -> None:
        stop = asyncio.Event()
        config = WorkerConfig(queues=("work",), listen=listen, **FAST)  # type: ignore[arg-type]
        worker = Worker(db_url, registry, config)
        runner = asyncio.create_task(worker.run(stop))
        await asyncio.sleep(0.5)  # idle, listening
        conn.execute("SELECT codity.enqueue('work', 'ping')")
        # Pickup, not its latency (tests/test_worker_faults.py and the bench measure that):
        # a loaded machine may take seconds to schedule a freshly started worker.
        deadline = time.monotonic() + 15
        while not done and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        stop.set()
        await runner

    asyncio.run(scenario())
    assert len(done) == 1


def test_registry_enqueue_joins_the_callers_transaction(db_url: str) -> None:
    registry = Registry()

    @registry.task("emails.send", queue="work")
    async def send(payload: Any, ctx: JobContext) -> None:
        return None

    with psycopg.connect(db_url) as conn:
        _setup(conn)
        conn.commit()
        with conn.transaction(force_rollback=True):
            send.enqueue(conn, {"to": "a@example.com"})
        with conn.transaction():
            job_id = send.enqueue(conn, {"to": "b@example.com"}, idempotency_key="k")
            assert send.enqueue(conn, {"to": "b@example.com"}, idempotency_key="k") == job_id
        rows = conn.execute("SELECT id, task, payload FROM codity.jobs").fetchall()
    assert rows == [(job_id, "emails.send", {"to": "b@example.com"})]


def test_handler_past_the_queue_timeout_fails_and_an_unknown_task_is_retried(
    db_url: str, conn: psycopg.Connection
) -> None:
    conn.execute(
        "SELECT codity.create_queue('work', p_max_attempts => 1, p_job_timeout_seconds => 1)"
    )
    registry = Registry()

    @registry.task("sleepy")
    async def sleepy(payload: Any, ctx: JobContext) -> None:
        await asyncio.sleep(30)

    conn.execute("SELECT codity.enqueue('work', 'sleepy')")
    conn.execute("SELECT codity.enqueue('work', 'nobody.handles.this', p_max_attempts => 2)")

    def done() -> bool:
        return conn.execute(
            "SELECT count(*) FROM codity.job_executions WHERE status = 'failed'"
        ).fetchone() == (2,)

    asyncio.run(_run_until(db_url, registry, done))
    errors: dict[str, str] = dict(
        conn.execute(
            "SELECT j.task, x.error FROM codity.job_executions x "
            "JOIN codity.jobs j ON j.id = x.job_id"
        ).fetchall()
    )
    assert errors == {
        "sleepy": "Timeout: handler ran longer than 1s",
        "nobody.handles.this": "UnknownTask: no handler registered for 'nobody.handles.this'",
    }
    statuses: dict[str, str] = dict(
        conn.execute("SELECT task, status::text FROM codity.jobs").fetchall()
    )
    assert statuses == {"sleepy": "dead_letter", "nobody.handles.this": "scheduled"}


def _held(conn: psycopg.Connection) -> list[tuple[int, int]]:
    """(job id, fence) of every running job, in id order."""
    rows = conn.execute(
        "SELECT id, execution_seq FROM codity.jobs WHERE status = 'running' ORDER BY id"
    ).fetchall()
    return [(int(a), int(b)) for a, b in rows]


@pytest.mark.parametrize("prefetch", [2, 0])
def test_prefetched_jobs_wait_for_a_slot_keep_their_leases_and_are_released_on_stop(
    db_url: str, conn: psycopg.Connection, prefetch: int
) -> None:
    create_queue(conn, "work", max_attempts=2, lease_seconds=1, **NO_BACKOFF)
    registry = Registry()
    began: list[int] = []

    @registry.task("slow")
    async def slow(payload: Any, ctx: JobContext) -> None:
        began.append(ctx.job_id)
        await asyncio.sleep(60)

    conn.execute(
        "SELECT codity.enqueue_many('work', %s)",
        [psycopg.types.json.Jsonb([{"task": "slow"} for _ in range(5)])],
    )

    async def scenario() -> tuple[list[tuple[int, int]], list[tuple[int, int]], int]:
        stop = asyncio.Event()
        config = WorkerConfig(
            queues=("work",), concurrency=1, prefetch=prefetch, heartbeat_s=0.2, poll_s=0.5,
            grace_s=0.3,
        )  # fmt: skip
        runner = asyncio.create_task(Worker(db_url, registry, config).run(stop))
        deadline = time.monotonic() + 20
        while len(_held(conn)) < 1 + prefetch or not began:
            assert time.monotonic() < deadline, "the worker did not claim in time"
            await asyncio.sleep(0.05)
        held = _held(conn)
        # Three leases of one second pass: the heartbeat keeps the waiting jobs' too.
        await asyncio.sleep(3.0)
        reaped = int(conn.execute("SELECT count(*) FROM codity.reap()").fetchall()[0][0])
        still = _held(conn)
        stop.set()
        await asyncio.wait_for(runner, timeout=10)
        return held, still, reaped

    held, still, reaped = asyncio.run(scenario())

    assert len(held) == 1 + prefetch, "the worker holds its concurrency plus its prefetch"
    assert len(began) == 1, "only as many handlers run as the concurrency allows"
    assert began[0] == held[0][0], "the oldest claim runs first"
    assert (reaped, still) == (0, held), "a waiting job's lease was not kept"
    # On stop the waiting jobs go back at once and the running one after the grace period
    # (or with the deregistration that follows), none of them charged an attempt.
    assert (
        conn.execute("SELECT status::text, attempt FROM codity.jobs").fetchall()
        == [("queued", 0)] * 5
    )
    executions = conn.execute(
        "SELECT status::text, attempt_refunded FROM codity.job_executions"
    ).fetchall()
    assert executions == [("released", True)] * (1 + prefetch)


def test_a_worker_holding_more_than_one_claim_allows_claims_in_parts(
    db_url: str, conn: psycopg.Connection
) -> None:
    # Concurrency 600 with the default prefetch holds 2,400 jobs; one claim hands out at
    # most 1,000 (CD010 above), which once stopped such a worker at its first claim.
    _setup(conn)
    registry = Registry()

    @registry.task("noop")
    async def noop(payload: Any, ctx: JobContext) -> None:
        return None

    conn.execute(
        "SELECT codity.enqueue_many('work', %s)",
        [psycopg.types.json.Jsonb([{"task": "noop"} for _ in range(1_200)])],
    )
    asyncio.run(
        _run_until(
            db_url, registry, lambda: _statuses(conn) == {"completed": 1_200}, concurrency=600
        )
    )
    assert conn.execute(
        "SELECT count(*), count(DISTINCT job_id) FROM codity.job_executions"
    ).fetchone() == (1_200, 1_200)


def test_jobs_finished_but_not_reported_count_against_what_the_worker_holds(
    db_url: str, conn: psycopg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While its reports cannot be sent (here: every completion batch waits on a gate, as
    behind a heartbeat that holds the reporter's lock for minutes), a worker claims no more
    than it may hold, plus one holding's worth of unreported jobs. Without the unreported
    jobs in its room it claimed every job of the queue, ran them, and sent none: in the
    soak, 640,000 of them, with heartbeats of minutes."""
    from codity.worker.reporter import Reporter

    _setup(conn)
    conn.execute(
        "SELECT codity.enqueue_many('work', %s)",
        [psycopg.types.json.Jsonb([{"task": "quick"} for _ in range(60)])],
    )
    registry = Registry()

    @registry.task("quick")
    async def quick(payload: Any, ctx: JobContext) -> None:
        return None

    gate = asyncio.Event()
    send = Reporter._complete

    async def held_back(self: Reporter, batch: Any) -> None:
        await gate.wait()
        await send(self, batch)

    monkeypatch.setattr(Reporter, "_complete", held_back)

    async def scenario() -> tuple[int, int]:
        stop = asyncio.Event()
        config = WorkerConfig(queues=("work",), concurrency=2, prefetch=2, **FAST)  # type: ignore[arg-type]
        runner = asyncio.create_task(Worker(db_url, registry, config).run(stop))
        await asyncio.sleep(1.5)  # three polls and many wake-ups: room to claim, if counted so
        held = _statuses(conn).get("running", 0)
        gate.set()
        deadline = time.monotonic() + 20
        while _statuses(conn).get("completed", 0) < 60:
            assert time.monotonic() < deadline, "the worker did not finish once reports flowed"
            await asyncio.sleep(0.05)
        stop.set()
        await asyncio.wait_for(runner, timeout=10)
        return held, _statuses(conn).get("completed", 0)

    held, completed = asyncio.run(scenario())
    # It holds 4 (concurrency 2, prefetch 2), and claims on while up to 4 more wait to be
    # reported: 8 at most, not the 60 of the queue.
    assert held <= 8, f"{held} jobs claimed while no report could be sent; at most 8 expected"
    assert completed == 60


def test_claimed_jobs_begin_before_the_next_claim_is_sent(
    db_url: str, conn: psycopg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim that returned jobs is followed at once by another while there is room; the
    handlers of the jobs it returned take their first step before that claim is sent, so
    pickup does not wait for the next claim's round trip (0.6 ms of the bench's pickup p50,
    docs/PERFORMANCE.md)."""
    _setup(conn)
    registry = Registry()
    events: list[str] = []

    @registry.task("ping")
    async def ping(payload: Any, ctx: JobContext) -> None:
        events.append("handler")

    claim = Worker._call_typed

    async def recorded(self: Worker, query: str, params: dict[str, Any], *, queue_id: int) -> Any:
        events.append("claim sent")
        rows = await claim(self, query, params, queue_id=queue_id)
        events.append(f"claim returned {len(rows)}")
        return rows

    monkeypatch.setattr(Worker, "_call_typed", recorded)

    async def scenario() -> None:
        stop = asyncio.Event()
        config = WorkerConfig(queues=("work",), **FAST)  # type: ignore[arg-type]
        runner = asyncio.create_task(Worker(db_url, registry, config).run(stop))
        await asyncio.sleep(0.5)  # idle, listening
        conn.execute("SELECT codity.enqueue('work', 'ping')")
        deadline = time.monotonic() + 15
        while "handler" not in events and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.2)
        stop.set()
        await runner

    asyncio.run(scenario())
    got = events.index("claim returned 1")
    assert events[got + 1 : got + 3] == ["handler", "claim sent"], events
