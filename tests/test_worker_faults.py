"""The worker under faults: no wedge, no convoy, no silent listener (docs/TESTING.md).

Each test reproduces a finding of the outside fault battery and fails without its fix:

- a handler result the database refuses (over 64 KB, not JSON, a NUL character) fails
  that one job, not retryable, and every later job still runs (it wedged the worker);
- a half-open LISTEN connection (its backend SIGSTOPped) is noticed by the listener's
  self-ping, and pickup is back at NOTIFY pace within seconds (it fell to the poll's pace);
- a job with a crash on record is claimed alone and never beside other jobs, so a poison
  pill is dead-lettered at the crash cap while every job it crashed with completes (all
  five were dead-lettered);
- a worker declared dead that comes back while its backends are being killed stays up
  (it exited 1 with AdminShutdown);
- the dead-worker threshold is a validated setting, the backoff notices a server coming
  back, and `codity worker` / `codity scheduler` never start the embedded server.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import socket
import subprocess
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from codity.backoff import Backoff
from codity.worker import JobContext, Registry, Worker, WorkerConfig
from tests.ports import free_port
from tests.processes import CODITY, REPO_ROOT, Probe, Processes, Ticker, wait_until
from tests.test_worker_runtime import _run_until, _setup, _statuses

Conn = psycopg.Connection[Any]


# -- 1. results the database refuses ------------------------------------------------------


def test_a_result_the_database_refuses_fails_that_job_and_never_the_worker(
    db_url: str, conn: Conn
) -> None:
    _setup(conn)
    registry = Registry()

    @registry.task("big")
    async def big(payload: Any, ctx: JobContext) -> dict[str, str]:
        return {"blob": "x" * 70_000}

    @registry.task("clock")
    async def clock(payload: Any, ctx: JobContext) -> dict[str, Any]:
        return {"at": datetime.now()}

    @registry.task("nul")
    async def nul(payload: Any, ctx: JobContext) -> dict[str, str]:
        return {"text": "a\x00b"}  # JSON, but PostgreSQL's jsonb refuses \\u0000

    @registry.task("ok")
    async def ok(payload: Any, ctx: JobContext) -> dict[str, int]:
        return {"n": payload["n"]}

    jobs: list[dict[str, Any]] = [{"task": t} for t in ("big", "clock", "nul")]
    jobs += [{"task": "ok", "payload": {"n": i}} for i in range(20)]
    conn.execute("SELECT codity.enqueue_many('work', %s)", [Jsonb(jobs)])

    def done() -> bool:
        s = _statuses(conn)
        return s.get("completed", 0) == 20 and s.get("dead_letter", 0) == 3

    asyncio.run(_run_until(db_url, registry, done, timeout=30))

    letters = dict(conn.execute("SELECT task, error FROM codity.dead_letters").fetchall())
    assert letters["big"].startswith("ResultTooLarge: the handler's result is 70012 bytes")
    assert letters["clock"].startswith("ResultNotJSON: the handler's result is not JSON")
    assert letters["nul"].startswith("ResultRefused: the database refused the result (22P05")
    assert conn.execute("SELECT DISTINCT reason FROM codity.dead_letters").fetchall() == [
        ("failed: not retryable",)
    ]
    assert _statuses(conn).keys() == {"completed", "dead_letter"}, "nothing left running"


# -- 2. a half-open listener ---------------------------------------------------------------


async def _pickup_s(conn: Conn, done: set[int]) -> float:
    """Enqueue one job and return how long until a worker completed it."""
    started = time.monotonic()
    row = conn.execute("SELECT job_id FROM codity.enqueue('work', 'ok')").fetchone()
    assert row is not None
    while int(row[0]) not in done:
        assert time.monotonic() - started < 30, "the job was never picked up"
        await asyncio.sleep(0.01)
    return time.monotonic() - started


def test_a_listener_whose_backend_froze_reconnects_and_pickup_returns_to_notify_pace(
    db_url: str, conn: Conn
) -> None:
    _setup(conn)
    registry = Registry()
    done: set[int] = set()

    @registry.task("ok")
    async def ok(payload: Any, ctx: JobContext) -> None:
        done.add(ctx.job_id)

    async def scenario() -> tuple[float, float, int]:
        stop = asyncio.Event()
        # The poll every 60 s: only a working LISTEN gives quick pickup.
        worker = Worker(
            db_url, registry, WorkerConfig(queues=("work",), heartbeat_s=1.0, poll_s=60.0)
        )
        runner = asyncio.create_task(worker.run(stop))
        try:
            await asyncio.sleep(0.5)
            before = await _pickup_s(conn, done)
            row = conn.execute(
                "SELECT pid FROM pg_catalog.pg_stat_activity"
                " WHERE application_name = 'codity-listener' AND datname = current_database()"
            ).fetchone()
            assert row is not None, "the listener is connected"
            frozen = int(row[0])
            os.kill(frozen, signal.SIGSTOP)
            try:
                after = await _pickup_s(conn, done)
            finally:
                os.kill(frozen, signal.SIGCONT)
                conn.execute("SELECT pg_catalog.pg_terminate_backend(%s)", [frozen])
            again = await _pickup_s(conn, done)
            assert not runner.done()
            print(f"\n[freeze] after={after:.2f} again={again:.2f}")
            return before, max(after, again), worker._listener.reconnects
        finally:
            stop.set()
            await asyncio.wait_for(runner, 15)

    before, after, reconnects = asyncio.run(scenario())
    print(f"\n[half-open listener] pickup {before:.3f}s before, {after:.2f}s after the freeze")
    assert before < 1.0
    # ping every 1 s + 2 s to answer + reconnect: back at NOTIFY pace in a few seconds,
    # not at the 60 s poll's.
    assert after < 6.0
    assert reconnects >= 1


# -- 3. claims keep a suspect alone ----------------------------------------------------------


def _suspect(conn: Conn, worker: int, queue: str) -> int:
    """Claim the next job of ``queue`` and let its lease expire: it has a crash on record."""
    row = conn.execute("SELECT job_id FROM codity.claim(%s, %s, 1)", [worker, queue]).fetchone()
    assert row is not None
    reaped = conn.execute(
        "SELECT job_id FROM codity.reap(p_now => now() + interval '1 hour')"
    ).fetchall()
    assert reaped == [row]
    return int(row[0])


def test_a_job_with_a_crash_on_record_is_claimed_alone_and_only_by_an_idle_worker(
    conn: Conn,
) -> None:
    conn.execute("SELECT codity.create_queue('q')")
    (worker,) = conn.execute("SELECT codity.register_worker('w', ARRAY['q'])").fetchone() or (0,)
    jobs = [
        int(r[0])
        for r in conn.execute(
            "SELECT job_id FROM codity.enqueue_many('q', %s) ORDER BY job_position",
            [Jsonb([{"task": f"t{i}"} for i in range(5)])],
        )
    ]
    pill = _suspect(conn, worker, "q")  # the oldest job, first in line again
    assert pill == jobs[0]

    def claim(limit: int, suspects: bool = True) -> list[tuple[int, int]]:
        return [
            (int(r[0]), int(r[1]))
            for r in conn.execute(
                "SELECT job_id, crashes FROM codity.claim(%s, 'q', %s, %s)",
                [worker, limit, suspects],
            )
        ]

    assert claim(10, suspects=False) == [(j, 0) for j in jobs[1:]], "busy: no suspect"
    conn.execute("SELECT codity.deregister_worker(%s)", [worker])  # gives them all back
    (worker,) = conn.execute("SELECT codity.register_worker('w2', ARRAY['q'])").fetchone() or (0,)
    assert claim(10) == [(pill, 1)], "idle, the suspect first in line: it comes alone"
    conn.execute("SELECT codity.deregister_worker(%s)", [worker])
    (worker,) = conn.execute("SELECT codity.register_worker('w3', ARRAY['q'])").fetchone() or (0,)
    conn.execute("UPDATE codity.jobs SET priority = 10 WHERE id = ANY (%s)", [jobs[1:3]])
    assert claim(10) == [(jobs[1], 0), (jobs[2], 0)], "clean jobs up to the suspect, not past"


# -- 4. the poison pill and its neighbours, with real processes ------------------------------


@pytest.mark.faults
def test_a_poison_pill_is_dead_lettered_alone_and_its_batch_mates_complete(
    probe: Probe, procs: Processes
) -> None:
    probe.execute("SELECT codity.create_queue('pill', p_lease_seconds => 2, p_max_crashes => 3)")
    jobs = [
        int(r[0])
        for r in probe.execute(
            "SELECT job_id FROM codity.enqueue_many('pill', %s) ORDER BY job_position",
            [
                Jsonb(
                    [{"task": "fault.suicide"}]
                    + [{"task": "fault.sleep", "payload": {"seconds": 1}} for _ in range(4)]
                )
            ],
        )
    ]
    pill, healthy = jobs[0], jobs[1:]
    deaths = 0
    started = time.monotonic()
    with Ticker(probe.url, interval=0.2):
        worker = procs.worker("pill", concurrency=5, name="pill-1")
        while True:
            states = dict(
                probe.rows("SELECT id, status::text FROM codity.jobs WHERE id = ANY (%s)", [jobs])
            )
            if states[pill] == "dead_letter" and all(states[j] == "completed" for j in healthy):
                break
            assert not any(states[j] == "dead_letter" for j in healthy), (
                f"a healthy job was dead-lettered with the pill: {states}\n{procs.logs()}"
            )
            assert time.monotonic() - started < 120, (
                f"{states} after {deaths} deaths\n{procs.logs()}"
            )
            if not worker.is_running():
                deaths += 1
                worker = procs.worker("pill", concurrency=5, name=f"pill-{deaths + 1}")
            time.sleep(0.05)
    crashes = dict(
        probe.rows("SELECT id, crash_count FROM codity.jobs WHERE id = ANY (%s)", [jobs])
    )
    reason = probe.value("SELECT reason FROM codity.dead_letters WHERE job_id = %s", [pill])
    print(f"\n[poison pill] worker deaths={deaths}, crash counts={crashes}, reason={reason!r}")
    assert reason == "crashed: lease expired 3 times (max_crashes 3)"
    assert deaths == 3
    # The healthy jobs shared at most the first, clean batch with the pill.
    assert all(crashes[j] <= 1 for j in healthy), crashes


# -- 5. reviving while the database kills our connections -----------------------------------


@pytest.mark.faults
def test_a_worker_swept_dead_revives_through_killed_connections_without_exiting(
    probe: Probe, procs: Processes
) -> None:
    probe.execute("SELECT codity.create_queue('revive')")
    worker = procs.worker("revive", name="revive")
    wait_until(
        lambda: probe.value(
            "SELECT count(*) FROM codity.workers WHERE pid = %s AND status = 'active'",
            [worker.pid],
        ),
        timeout=30,
        what="the worker registers",
        alive=[worker],
    )
    with Ticker(probe.url, interval=0.1, stale_after="1 second"):
        for cycle in range(2):
            worker.send(signal.SIGSTOP)
            wait_until(
                lambda: probe.value(
                    "SELECT status = 'dead' FROM codity.workers WHERE pid = %s", [worker.pid]
                ),
                timeout=30,
                what="the sweep declares the frozen worker dead",
            )
            worker.send(signal.SIGCONT)
            storm_until = time.monotonic() + 3.0
            killed = 0
            while time.monotonic() < storm_until:
                killed += len(
                    probe.execute(
                        "SELECT pg_catalog.pg_terminate_backend(pid)"
                        " FROM pg_catalog.pg_stat_activity WHERE datname = current_database()"
                        " AND application_name IN ('codity-worker', 'codity-listener')"
                    )
                )
                time.sleep(random.uniform(0.02, 0.04))
            assert worker.is_running(), f"cycle {cycle}: exited\n{worker.output()}"
            print(f"\n[revive] cycle {cycle}: {killed} backends terminated, worker still up")
        [job] = [
            int(r[0])
            for r in probe.execute("SELECT job_id FROM codity.enqueue('revive', 'fault.sleep')")
        ]
        wait_until(
            lambda: probe.value(
                "SELECT status = 'completed' FROM codity.jobs WHERE id = %s", [job]
            ),
            timeout=30,
            what="the revived worker runs the next job",
            alive=[worker],
        )
    assert probe.value("SELECT status::text FROM codity.workers WHERE pid = %s", [worker.pid]) == (
        "active"
    )
    worker.send(signal.SIGTERM)
    assert worker.wait(timeout=20) == 0


# -- 6. the dead-worker threshold is a setting ---------------------------------------------


def _sqlstate(conn: Conn, query: str, params: list[Any] | None = None) -> str:
    with pytest.raises(psycopg.Error) as caught:
        conn.execute(query, params)
    return caught.value.sqlstate or ""


def test_the_dead_worker_threshold_is_a_setting_that_must_allow_two_heartbeats(
    conn: Conn,
) -> None:
    conn.execute("SELECT codity.create_queue('q')")
    assert conn.execute("SELECT worker_dead_after FROM codity.configure()").fetchone() == (
        _seconds(15),
    )
    # A worker that heartbeats every 10 s cannot live under a 15 s threshold ...
    assert (
        _sqlstate(
            conn, "SELECT codity.register_worker('slow', ARRAY['q'], p_heartbeat_seconds => 10)"
        )
        == "CD010"
    )
    conn.execute("SELECT codity.configure(interval '30 seconds')")
    (slow,) = conn.execute(
        "SELECT codity.register_worker('slow', ARRAY['q'], p_heartbeat_seconds => 10)"
    ).fetchone() or (0,)
    # ... and the threshold cannot drop below two of an active worker's heartbeats.
    assert _sqlstate(conn, "SELECT codity.configure(interval '15 seconds')") == "CD010"
    assert _sqlstate(conn, "SELECT codity.configure(interval '1 second')") == "CD010"
    # tick sweeps by the setting: silent for 20 s is alive under 30 s, dead after 31.
    swept = "SELECT workers_dead FROM codity.tick(now() + %s::interval)"
    assert conn.execute(swept, ["20 seconds"]).fetchone() == (0,)
    assert conn.execute(swept, ["31 seconds"]).fetchone() == (1,)
    assert conn.execute(
        "SELECT status::text FROM codity.workers WHERE id = %s", [slow]
    ).fetchone() == ("dead",)


def _seconds(n: int) -> timedelta:
    return timedelta(seconds=n)


# -- 7. backoff notices a server coming back -----------------------------------------------


def test_backoff_ends_its_wait_as_soon_as_a_refusing_server_accepts_again() -> None:
    port = free_port()

    async def scenario() -> float:
        backoff = Backoff(first_s=10.0, cap_s=10.0)  # a 5-10 s wait unless the probe ends it
        started = time.monotonic()
        waiting = asyncio.create_task(backoff.wait(server=("127.0.0.1", port)))
        await asyncio.sleep(0.5)  # refused meanwhile
        with socket.create_server(("127.0.0.1", port)):
            await asyncio.wait_for(waiting, 3.0)
        return time.monotonic() - started

    assert asyncio.run(scenario()) < 1.5


# -- 8. only `codity up` and `codity db start` start the embedded server --------------------


def test_a_scheduler_without_a_database_waits_for_it_and_never_starts_it(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(CODITY_HOME=str(tmp_path / "home"), CODITY_DB_PORT=str(free_port()))
    log = tmp_path / "scheduler.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [*CODITY, "scheduler", "--tick-ms", "200"],
            env=env,
            cwd=REPO_ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until(
            lambda: "the embedded database is not running; waiting for it" in log.read_text(),
            timeout=30,
            what="the scheduler says it waits",
        )
        time.sleep(1.0)
        assert process.poll() is None, log.read_text()
        assert not (tmp_path / "home" / "pgdata").exists(), "it initialised a server"
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0, log.read_text()
