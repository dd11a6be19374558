"""Issue 25's groundwork on one server: a multi-host URL, fast-failing connection settings,
and a read-only server (25006) waited out by every process instead of crashing it.

A real failover (pg_auto_failover) is another marker's business; here the server is the
suite's own. A URL whose first host refuses connections stands for a primary that is gone;
``default_transaction_read_only`` set on the database stands for a standby reached through a
single-host URL or a proxy: new sessions get SQLSTATE 25006 on every write, as there.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from codity.db import migrate
from codity.db.conninfo import conninfo, hosts
from codity.scheduler import run_scheduler
from codity.status import collect_status
from codity.web.access import Role
from codity.worker import JobContext, Registry, Worker, WorkerConfig
from tests.dashboard import sign_in
from tests.ports import free_port
from tests.sqlapi import create_queue, one, row
from tests.webapp import add_user, make_tenant, web_client


def _two_hosts(db_url: str) -> str:
    """The same database behind a URL whose first host refuses connections."""
    params = conninfo_to_dict(db_url)
    user, port, name = params.get("user", "postgres"), params["port"], params["dbname"]
    return f"postgresql://{user}@127.0.0.1:{free_port()},127.0.0.1:{port}/{name}"


def _pings() -> tuple[Registry, list[int]]:
    """A registry whose task ``ping`` records each job it ran."""
    done: list[int] = []
    registry = Registry()

    @registry.task("ping")
    async def ping(payload: Any, ctx: JobContext) -> None:
        done.append(ctx.job_id)

    return registry, done


async def _until(
    condition: Callable[[], bool], runner: asyncio.Task[None], deadline: float
) -> None:
    """Wait for ``condition`` while the worker runs, until ``deadline`` (monotonic)."""
    while not condition():
        assert time.monotonic() < deadline and not runner.done(), runner
        await asyncio.sleep(0.02)


def _ping_worker(
    url: str, registry: Registry, done: list[int], *, readonly_for: Any = None
) -> None:
    """Run a worker until one job ran; with ``readonly_for``, first check that it lives
    through 1.5 s of a read-only database, then make the database writable with it."""

    async def work() -> None:
        stop = asyncio.Event()
        config = WorkerConfig(queues=("work",), heartbeat_s=0.5, poll_s=0.5, grace_s=2.0)
        runner = asyncio.create_task(Worker(url, registry, config).run(stop))
        if readonly_for is not None:
            await asyncio.sleep(1.5)
            assert not runner.done(), f"the worker stopped on a read-only server: {runner}"
            readonly_for()
        await _until(lambda: bool(done), runner, time.monotonic() + 20)
        stop.set()
        await asyncio.wait_for(runner, 15)

    asyncio.run(work())


def test_defaults_are_added_and_what_the_url_or_environment_says_wins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PGCONNECT_TIMEOUT", raising=False)
    monkeypatch.delenv("PGTARGETSESSIONATTRS", raising=False)
    one_host = conninfo_to_dict(conninfo("postgresql://u@db:5432/codity", application_name="x"))
    assert one_host["connect_timeout"] == "5" and one_host["tcp_user_timeout"] == "10000"
    assert one_host["keepalives"] == "1" and one_host["application_name"] == "x"
    assert "target_session_attrs" not in one_host, "one host: a proxy or a server, as it is"
    both = conninfo_to_dict(conninfo("postgresql://u@a:5432,b:5433/codity"))
    assert both["target_session_attrs"] == "read-write" and both["host"] == "a,b"
    assert hosts("host=a,b port=1,2 dbname=x") == ["a", "b"] and hosts("dbname=x") == []
    mine = conninfo_to_dict(
        conninfo("postgresql://u@a,b/c?connect_timeout=2&target_session_attrs=primary")
    )
    assert mine["connect_timeout"] == "2" and mine["target_session_attrs"] == "primary"
    monkeypatch.setenv("PGCONNECT_TIMEOUT", "9")
    monkeypatch.setenv("PGTARGETSESSIONATTRS", "any")
    env = conninfo_to_dict(conninfo("postgresql://u@a,b/c"))
    assert "connect_timeout" not in env and "target_session_attrs" not in env


def test_every_process_works_through_a_url_whose_first_host_is_gone(
    db_url: str, conn: psycopg.Connection
) -> None:
    """``codity migrate`` crashed on such a URL (yoyo read '5432,127.0.0.1:5433' as a port)."""
    url = _two_hosts(db_url)
    migrate(url)  # applied already: it connects, locks, finds nothing pending
    create_queue(conn, "work")
    registry, done = _pings()
    job = one(conn, "SELECT job_id FROM codity.enqueue('work', 'ping')")
    _ping_worker(url, registry, done)
    assert done == [job]
    assert any(q["queue"] == "work" for q in collect_status(url)["queues"])
    with web_client(url) as client:
        assert client.get("/readyz").status_code == 200


@pytest.fixture
def read_only(db_url: str, conn: psycopg.Connection) -> Iterator[Any]:
    """Makes the database's new sessions read-only; the fixture's value undoes it."""
    name = sql.Identifier(str(conninfo_to_dict(db_url)["dbname"]))
    on = sql.SQL("ALTER DATABASE {} SET default_transaction_read_only = on").format(name)
    off = sql.SQL("ALTER DATABASE {} RESET default_transaction_read_only").format(name)

    def writable() -> None:
        conn.execute(off)

    conn.execute(on)
    try:
        yield writable
    finally:
        conn.execute(off)


def test_the_scheduler_waits_out_a_read_only_server_and_ticks_again(
    db_url: str, conn: psycopg.Connection, read_only: Any
) -> None:
    """It exited 1 on ReadOnlySqlTransaction: only connection errors were retried."""
    create_queue(conn, "work")
    conn.execute("SELECT codity.enqueue('work', 'later', p_run_at => now() + interval '1 second')")
    stop = threading.Event()
    failed: list[BaseException] = []

    def run() -> None:
        try:
            run_scheduler(db_url, 100, stop)
        except BaseException as exc:
            failed.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        time.sleep(2.0)  # ticks refused (25006) while the job became due
        assert thread.is_alive(), f"the scheduler stopped: {failed}"
        assert one(conn, "SELECT status::text FROM codity.jobs") == "scheduled"
        read_only()
        deadline = time.monotonic() + 15
        while one(conn, "SELECT status::text FROM codity.jobs") != "queued":
            assert time.monotonic() < deadline, "no tick promoted the job once writable"
            assert thread.is_alive(), f"the scheduler stopped: {failed}"
            time.sleep(0.1)
    finally:
        stop.set()
        thread.join(10)
    assert not failed


def test_a_worker_waits_out_a_read_only_server_and_runs_its_job(
    db_url: str, conn: psycopg.Connection, read_only: Any
) -> None:
    """Registering raised ReadOnlySqlTransaction out of Worker.run."""
    create_queue(conn, "work")
    conn.execute("SELECT codity.enqueue('work', 'ping')")
    registry, done = _pings()
    _ping_worker(db_url, registry, done, readonly_for=read_only)
    assert len(done) == 1


def test_the_web_app_is_not_ready_on_a_read_only_server_and_answers_503(
    db_url: str, read_only: Any
) -> None:
    """It said ready while on a standby; a write there was a 500."""
    with web_client(db_url) as client:
        ready = client.get("/readyz")
        assert ready.status_code == 503, ready.text
        assert "read-only" in ready.json()["error"]["message"]
        read_only()
        deadline = time.monotonic() + 10
        while client.get("/readyz").status_code != 200:
            assert time.monotonic() < deadline, "still not ready once writable"
            time.sleep(0.2)


def test_a_heartbeat_lost_with_its_session_is_sent_again_at_once(
    db_url: str, conn: psycopg.Connection, caplog: pytest.LogCaptureFixture
) -> None:
    """A switchover or a restart ends every session (57P01). The failed heartbeat waited a
    whole interval for the next: two lost in a row used up a 10 s lease (issue 25)."""
    create_queue(conn, "work")
    registry = Registry()

    async def work() -> float:
        stop = asyncio.Event()
        config = WorkerConfig(queues=("work",), heartbeat_s=4.0, poll_s=60.0, grace_s=2.0)
        runner = asyncio.create_task(Worker(db_url, registry, config).run(stop))
        beat = "SELECT max(last_heartbeat_at) FROM codity.workers"
        deadline = time.monotonic() + 30
        await _until(lambda: one(conn, beat) is not None, runner, deadline)
        first = one(conn, beat)
        await _until(lambda: one(conn, beat) != first, runner, deadline)  # the next: 4 s away
        ended = one(conn, "SELECT count(pg_catalog.pg_terminate_backend(a.pid))"
                          " FROM pg_catalog.pg_stat_activity a"
                          " WHERE a.application_name = 'codity-worker'")  # fmt: skip
        assert ended >= 1
        last = one(conn, beat)
        await _until(
            lambda: any("heartbeat failed" in r.getMessage() for r in caplog.records),
            runner,
            deadline,
        )
        failed_at = time.monotonic()
        await _until(lambda: one(conn, beat) != last, runner, deadline)
        resent_after = time.monotonic() - failed_at
        stop.set()
        await asyncio.wait_for(runner, 15)
        return resent_after

    with caplog.at_level(logging.WARNING):
        resent_after = asyncio.run(work())
    # At once, with the backoff's first step; not at the next beat, 4 s later.
    assert resent_after < 2.0, f"the heartbeat was resent {resent_after:.1f} s after it failed"


def test_back_from_an_outage_the_scheduler_lets_live_workers_heartbeat_before_reaping(
    db_url: str, conn: psycopg.Connection
) -> None:
    """Leases ran out while the database was away; reaped at the first tick, the jobs of
    workers that lived through it ran twice and were charged a crash (issue 25: 18-32 per
    failover). A worker that stays silent is still declared dead and its job reaped."""
    conn.execute("SELECT * FROM codity.configure(p_worker_dead_after => interval '3 seconds')")
    create_queue(conn, "work", lease_seconds=1)
    name = sql.Identifier(str(conninfo_to_dict(db_url)["dbname"]))
    admin = psycopg.connect(make_conninfo(db_url, dbname="postgres"), autocommit=True)
    stop = threading.Event()
    thread = threading.Thread(target=run_scheduler, args=(db_url, 100, stop), daemon=True)
    thread.start()
    try:
        time.sleep(0.5)  # ticking
        # The outage: no new session, the scheduler's own ended (as at a failover).
        admin.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS false").format(name))
        conn.execute("SELECT pg_catalog.pg_terminate_backend(a.pid) FROM pg_stat_activity a"
                     " WHERE a.application_name = 'codity-scheduler'")  # fmt: skip
        held = {}
        for worker in ("alive", "gone"):
            wid = one(
                conn,
                "SELECT codity.register_worker(%s, '{work}', p_heartbeat_seconds => 0.5)",
                [worker],
            )
            conn.execute("SELECT codity.enqueue('work', 'long')")
            job, fence = row(
                conn,
                "SELECT job_id, fence FROM codity.claim(%s, 'work', 1, p_start => true)",
                [wid],
            )
            held[worker] = (wid, job, fence)
        time.sleep(1.5)  # both leases run out while the scheduler cannot connect
        admin.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS true").format(name))
        back = "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'codity-scheduler'"
        deadline = time.monotonic() + 10
        while one(conn, back) == 0:
            assert time.monotonic() < deadline, "the scheduler did not reconnect"
            time.sleep(0.05)
        time.sleep(0.5)  # the scheduler back first, ticking: the workers' heartbeats follow
        wid, job, fence = held["alive"]
        deadline = time.monotonic() + 6  # the 3 s grace, and a few ticks after it
        while time.monotonic() < deadline:
            conn.execute("SELECT * FROM codity.heartbeat(%s, %s, %s)", [wid, [job], [fence]])
            time.sleep(0.3)
        assert thread.is_alive()
    finally:
        stop.set()
        thread.join(10)
        admin.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS true").format(name))
        admin.close()
    state = "SELECT status::text, crash_count FROM codity.jobs WHERE id = %s"
    assert conn.execute(state, [held["alive"][1]]).fetchone() == ("running", 0)
    assert conn.execute(state, [held["gone"][1]]).fetchone() == ("queued", 1)
    workers = "SELECT status::text FROM codity.workers WHERE id = %s"
    assert one(conn, workers, [held["alive"][0]]) == "active"
    assert one(conn, workers, [held["gone"][0]]) == "dead"


def test_the_dashboard_answers_503_not_500_when_its_sessions_were_killed_and_recovers_at_once(
    db_url: str, conn: psycopg.Connection
) -> None:
    """From outside, after every fault of a pg_auto_failover pair: the dashboard answered
    500 once (``AdminShutdown`` reading the session cookie, outside the page's error
    handling), then a 503 per pooled session the failover had killed. Now the first
    request after the kill answers 503 with ``Retry-After``, the pool tests its other
    sessions at once (``checked_after_loss``), and the next request is answered. Without
    the check it took one 503 per pooled session. ``raise_server_exceptions`` is on."""
    owner = add_user(conn, make_tenant(conn), Role.OWNER)
    with web_client(db_url) as client:
        session = sign_in(client, conn, owner)
        assert session.get("/").status_code == 200
        killed = conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE application_name = 'codity-web' AND datname = current_database()"
        ).fetchone()
        assert killed is not None and killed[0] >= 1
        answers: list[Any] = []
        deadline = time.monotonic() + 10
        while not answers or answers[-1].status_code != 200:
            assert time.monotonic() < deadline, [a.status_code for a in answers]
            answers.append(session.get("/"))
        first = answers[0]
        assert first.status_code == 503 and first.headers["retry-after"] == "5", first.text
        assert len(answers) <= 2, [a.status_code for a in answers]
