"""The seed's Reliability section, proven with real processes and real signals.

Every test starts real ``codity`` processes (workers, schedulers, ``codity up``) against a
real PostgreSQL, injects a fault from outside — SIGKILL, SIGSTOP/SIGCONT, SIGTERM, a
handler that kills its own process, a server restart, terminated backends — and asserts
its invariant in the database (jobs, job_executions, dead_letters, fence_rejections).
Nothing is ordered by sleeping: the tests poll the database with generous deadlines and
go on as soon as the condition holds. Intervals are short (heartbeat 0.2 s, lease 2 s,
tick 0.2 s). The figures each test prints (``-s``) are recorded in docs/TESTING.md.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from codity.db import migrate
from codity.db.embedded import EmbeddedServer, EmbeddedServerError
from tests.fault_tasks import create_tables
from tests.ports import free_port
from tests.processes import APP, CodityProcess, Probe, Processes, Ticker, wait_until
from tests.sqlapi import NO_BACKOFF, create_queue_call, enqueue_many_call

# Marked one by one: `faults` leaves the default run (CI runs it, .ci/run). Two stay in the
# default run as its smoke of real processes and signals: a SIGKILLed worker's job is
# requeued, refunded and completed once, and Ctrl-C of a starting `codity up` exits 0.

LEASE_S = 2


# -- fixtures and helpers ------------------------------------------------------------------


def _queue(
    probe: Probe, name: str, *, lease_s: int = LEASE_S, max_crashes: int = 5, attempts: int = 3
) -> None:
    probe.execute(
        *create_queue_call(
            name,
            max_attempts=attempts,
            **NO_BACKOFF,
            lease_seconds=lease_s,
            max_crashes=max_crashes,
        )
    )


def _enqueue(probe: Probe, queue: str, jobs: list[dict[str, Any]]) -> list[int]:
    return [int(r[0]) for r in probe.execute(*enqueue_many_call(queue, jobs))]


def _worker_id(probe: Probe, process: CodityProcess) -> int:
    """The id the worker process registered under (wait for it to register)."""
    found = wait_until(
        lambda: probe.value(
            "SELECT coalesce(max(id), 0) FROM codity.workers WHERE pid = %s AND status = 'active'",
            [process.pid],
        ),
        timeout=30,
        what=f"{process.name} registers",
        alive=[process],
    )
    return int(found)


def _event(probe: Probe, job_id: int, fence: int, event: str) -> Any:
    return probe.value(
        "SELECT max(pid) FROM public.fault_events WHERE job_id = %s AND fence = %s AND event = %s",
        [job_id, fence, event],
    )


def _executions(probe: Probe, job_id: int) -> list[tuple[Any, ...]]:
    return probe.rows(
        "SELECT execution_seq, attempt, worker_id, status::text, attempt_refunded "
        "FROM codity.job_executions WHERE job_id = %s ORDER BY execution_seq",
        [job_id],
    )


def _assert_no_job_completed_twice(probe: Probe) -> None:
    twice = probe.rows(
        "SELECT job_id, count(*) FROM codity.job_executions WHERE status = 'completed' "
        "GROUP BY job_id HAVING count(*) > 1"
    )
    assert twice == [], f"jobs completed more than once: {twice[:10]}"


def _report(title: str, **figures: Any) -> None:
    print(f"\n[{title}] " + ", ".join(f"{k}={v}" for k, v in figures.items()))


# -- 1. SIGKILL mid-job ----------------------------------------------------------------------


def test_sigkilled_worker_job_is_requeued_refunded_and_completed_once(
    probe: Probe, procs: Processes
) -> None:
    _queue(probe, "kill")
    [job] = _enqueue(probe, "kill", [{"task": "fault.hold", "payload": {"hold_fences": [1]}}])
    victim = procs.worker("kill", name="victim")
    with Ticker(probe.url, interval=0.2):
        wait_until(
            lambda: _event(probe, job, 1, "started") == victim.pid,
            timeout=30,
            what="the victim starts the job",
            alive=[victim],
        )
        victim_id = _worker_id(probe, victim)
        rescuer = procs.worker("kill", name="rescuer")
        rescuer_id = _worker_id(probe, rescuer)

        killed_at = probe.value("SELECT clock_timestamp()")
        victim.send(signal.SIGKILL)
        assert victim.wait(timeout=10) == -signal.SIGKILL

        wait_until(
            lambda: probe.value(
                "SELECT status = 'completed' FROM codity.jobs WHERE id = %s", [job]
            ),
            timeout=30,
            what="the job completes on the rescuer",
            alive=[rescuer],
        )
    reaped_at, claimed_again_at = probe.one(
        "SELECT r.finished_at, c.claimed_at FROM codity.job_executions r, codity.job_executions c "
        "WHERE r.job_id = %s AND r.execution_seq = 1 AND c.job_id = r.job_id "
        "AND c.execution_seq = 2",
        [job],
    )
    requeue_s = (reaped_at - killed_at).total_seconds()
    _report(
        "sigkill",
        requeued_after_kill_s=round(requeue_s, 2),
        reclaimed_after_requeue_s=round((claimed_again_at - reaped_at).total_seconds(), 3),
        lease_s=LEASE_S,
        tick_s=0.2,
    )

    assert _executions(probe, job) == [
        (1, 1, victim_id, "reaped", True),
        (2, 1, rescuer_id, "completed", False),
    ]
    job_row = probe.one(
        "SELECT status::text, attempt, crash_count FROM codity.jobs WHERE id = %s", [job]
    )
    assert job_row == ("completed", 1, 1)  # one attempt charged; the crash is counted
    error = probe.value(
        "SELECT error FROM codity.job_executions WHERE job_id = %s AND execution_seq = 1", [job]
    )
    assert "lease expired" in error
    # Requeued within lease + tick of the kill (the last heartbeat extended the lease to at
    # most LEASE_S after it); generous margin for a loaded machine.
    assert requeue_s < LEASE_S + 0.2 + 3
    assert _event(probe, job, 2, "started") == rescuer.pid


# -- 2. SIGSTOP past the lease, SIGCONT after another worker completed the job ---------------


@pytest.mark.faults
def test_worker_frozen_past_its_lease_is_told_and_cannot_report(
    probe: Probe, procs: Processes
) -> None:
    _queue(probe, "freeze")
    [job] = _enqueue(probe, "freeze", [{"task": "fault.hold", "payload": {"hold_fences": [1]}}])
    frozen = procs.worker("freeze", name="frozen")
    # Frozen past its lease (2 s: the reaper requeues the job), then past the sweep's
    # staleness limit (3 s: the worker is declared dead) before it is thawed.
    with Ticker(probe.url, interval=0.2, stale_after="3 seconds"):
        wait_until(
            lambda: _event(probe, job, 1, "started") == frozen.pid,
            timeout=30,
            what="the first worker starts the job",
            alive=[frozen],
        )
        frozen_id = _worker_id(probe, frozen)
        frozen.send(signal.SIGSTOP)
        stopped_at = probe.value("SELECT clock_timestamp()")

        other = procs.worker("freeze", name="other")
        other_id = _worker_id(probe, other)
        wait_until(
            lambda: probe.value(
                "SELECT status = 'completed' FROM codity.jobs WHERE id = %s", [job]
            ),
            timeout=30,
            what="the other worker completes the job",
            alive=[other],
        )
        completed_at = probe.value(
            "SELECT finished_at FROM codity.job_executions WHERE job_id = %s AND execution_seq = 2",
            [job],
        )
        wait_until(
            lambda: probe.value(
                "SELECT status = 'dead' FROM codity.workers WHERE id = %s", [frozen_id]
            ),
            timeout=30,
            what="the frozen worker is declared dead",
        )
        declared_dead_at = probe.value(
            "SELECT stopped_at FROM codity.workers WHERE id = %s", [frozen_id]
        )
        frozen.send(signal.SIGCONT)
        resumed_at = probe.value("SELECT clock_timestamp()")
        told_pid = wait_until(
            lambda: _event(probe, job, 1, "told"),
            timeout=30,
            what="the stale handler is told its lease was lost",
            alive=[frozen],
        )
        assert told_pid == frozen.pid
        told_at = probe.value(
            "SELECT at FROM public.fault_events WHERE job_id = %s AND event = 'told'", [job]
        )
        rejections = wait_until(
            lambda: probe.rows(
                "SELECT call, worker_id, presented_fence, current_fence, job_status::text "
                "FROM codity.fence_rejections WHERE job_id = %s",
                [job],
            ),
            timeout=10,
            what="the stale heartbeat is recorded",
        )
        # Alive after all: its heartbeat makes it active again, and it takes new work.
        other.send(signal.SIGTERM)
        assert other.wait(timeout=15) == 0
        [after] = _enqueue(probe, "freeze", [{"task": "fault.sleep"}])
        wait_until(
            lambda: probe.value(
                "SELECT max(worker_id) FROM codity.job_executions "
                "WHERE job_id = %s AND status = 'completed'",
                [after],
            ),
            timeout=30,
            what="the thawed worker runs a new job",
            alive=[frozen],
        )
        assert _executions(probe, after)[0][2] == frozen_id
        reaped_at = probe.value(
            "SELECT finished_at FROM codity.job_executions WHERE job_id = %s AND execution_seq = 1",
            [job],
        )
        frozen.send(signal.SIGTERM)
        assert frozen.wait(timeout=15) == 0
    _report(
        "sigstop",
        frozen_for_s=round((resumed_at - stopped_at).total_seconds(), 2),
        requeued_after_s=round((reaped_at - stopped_at).total_seconds(), 2),
        declared_dead_after_s=round((declared_dead_at - stopped_at).total_seconds(), 2),
        completed_elsewhere_after_stop_s=round((completed_at - stopped_at).total_seconds(), 2),
        told_after_sigcont_s=round((told_at - resumed_at).total_seconds(), 3),
        rejections=rejections,
    )

    # One stale heartbeat (two if a second one beat the handler to its exit); and, when the
    # worker's own lease clock stopped the handler before a heartbeat said it was lost,
    # its give-back of the job, refused as stale too (DESIGN_DECISIONS 64).
    assert ("heartbeat", frozen_id, 1, 2, "completed") in set(rejections)
    assert set(rejections) <= {
        ("heartbeat", frozen_id, 1, 2, "completed"),
        ("release", frozen_id, 1, 2, "completed"),
    }
    assert _executions(probe, job) == [
        (1, 1, frozen_id, "reaped", True),
        (2, 1, other_id, "completed", False),
    ]
    result = probe.value(
        "SELECT result FROM codity.job_executions WHERE job_id = %s AND status = 'completed'",
        [job],
    )
    assert result == {"pid": other.pid, "fence": 2}
    _assert_no_job_completed_twice(probe)


@pytest.mark.faults
@pytest.mark.parametrize("owner", ["running", "completed"])
def test_stale_completion_after_sigcont_is_refused_and_recorded(
    probe: Probe, procs: Processes, owner: str
) -> None:
    """The frozen handler finishes before any heartbeat can tell it: its complete is refused.

    Its heartbeat interval is a minute, so the first report after SIGCONT is the
    completion itself (each execution waits on its own gate, ``open-<fence>``) — or, when
    the worker's own lease clock wins the race at thaw (DESIGN_DECISIONS 64), the handler
    is stopped and the job given back, and that release is the stale call. The new owner is
    still running the job (only the fence refuses the stale call) or has already completed
    it (the state refuses it too).
    """
    _queue(probe, "freeze")
    [job] = _enqueue(probe, "freeze", [{"task": "fault.hold", "payload": {"gate": "open-{fence}"}}])
    # A worker that heartbeats once a minute must be allowed by the dead-worker threshold
    # (the Ticker sweeps with its own, 15 s).
    probe.execute("SELECT codity.configure(interval '5 minutes')")
    frozen = procs.worker("freeze", name="frozen", WORKER_HEARTBEAT_MS="60000")
    with Ticker(probe.url, interval=0.2):
        wait_until(
            lambda: _event(probe, job, 1, "started") == frozen.pid,
            timeout=30,
            what="the first worker starts the job",
            alive=[frozen],
        )
        frozen_id = _worker_id(probe, frozen)
        frozen.send(signal.SIGSTOP)
        other = procs.worker("freeze", name="other")
        other_id = _worker_id(probe, other)
        wait_until(
            lambda: _event(probe, job, 2, "started") == other.pid,
            timeout=30,
            what="the other worker takes the job over",
            alive=[other],
        )

        def let_the_owner_complete() -> None:
            probe.execute("INSERT INTO public.fault_gates VALUES ('open-2')")
            wait_until(
                lambda: probe.value(
                    "SELECT status = 'completed' FROM codity.jobs WHERE id = %s", [job]
                ),
                timeout=30,
                what="the other worker completes the job",
                alive=[other],
            )

        if owner == "completed":
            let_the_owner_complete()
        probe.execute("INSERT INTO public.fault_gates VALUES ('open-1')")
        frozen.send(signal.SIGCONT)
        rejections = wait_until(
            lambda: probe.rows(
                "SELECT call, worker_id, presented_fence, current_fence, job_status::text "
                "FROM codity.fence_rejections WHERE job_id = %s",
                [job],
            ),
            timeout=30,
            what="the stale completion is refused",
            alive=[frozen],
        )
        if owner == "running":
            let_the_owner_complete()
        for process in (frozen, other):
            process.send(signal.SIGTERM)
            assert process.wait(timeout=15) == 0
    _report(f"stale-complete/{owner}", rejections=rejections)

    assert (_event(probe, job, 1, "told") or _event(probe, job, 1, "gate")) == frozen.pid
    [(call, *refused)] = rejections
    assert call in ("complete", "release") and refused == [frozen_id, 1, 2, owner], rejections
    assert _executions(probe, job) == [
        (1, 1, frozen_id, "reaped", True),
        (2, 1, other_id, "completed", False),
    ]
    result = probe.value(
        "SELECT result FROM codity.job_executions WHERE job_id = %s AND status = 'completed'",
        [job],
    )
    assert result == {"pid": other.pid, "fence": 2}
    _assert_no_job_completed_twice(probe)


# -- 3. SIGTERM under load -------------------------------------------------------------------


@pytest.mark.faults
def test_sigterm_under_load_drains_releases_unfinished_jobs_and_exits_zero(
    probe: Probe, procs: Processes
) -> None:
    _queue(probe, "drain")
    load = _enqueue(
        probe,
        "drain",
        [{"task": "fault.sleep", "payload": {"seconds": 0.01}, "priority": 10}] * 200,
    )
    # In flight at SIGTERM: three that finish within the grace period, two that never do.
    medium = _enqueue(
        probe, "drain", [{"task": "fault.sleep", "payload": {"seconds": 1.5}, "priority": 5}] * 3
    )
    held = _enqueue(probe, "drain", [{"task": "fault.hold", "priority": 5}] * 2)
    backlog = _enqueue(
        probe, "drain", [{"task": "fault.sleep", "payload": {"seconds": 0.01}}] * 100
    )
    special = medium + held
    worker = procs.worker("drain", concurrency=5, SHUTDOWN_GRACE_MS="3000")
    with Ticker(probe.url, interval=0.2):  # a lapse of heartbeats during the drain would be reaped
        # 'running' in the database is also true of a prefetched job still waiting for a
        # slot; once the load is completed, the five slots hold the five slow jobs.
        wait_until(
            lambda: (
                probe.value(
                    "SELECT count(*) = 5 FROM codity.jobs WHERE id = ANY(%s)"
                    " AND status = 'running'",
                    [special],
                )
                and probe.value(
                    "SELECT count(*) = 0 FROM codity.jobs WHERE id = ANY(%s)"
                    " AND status <> 'completed'",
                    [load],
                )
            ),
            timeout=60,
            what="the load is done and the five slow jobs are running",
            alive=[worker],
        )
        sigterm_at = time.monotonic()
        worker.send(signal.SIGTERM)
        code = worker.wait(timeout=30)
        drained_s = time.monotonic() - sigterm_at
    _report("sigterm", exit_code=code, drain_s=round(drained_s, 2), grace_s=3.0)
    assert code == 0, worker.output()

    jobs = dict(probe.rows("SELECT id, status::text FROM codity.jobs"))
    assert {jobs[j] for j in load + medium} == {"completed"}
    assert {jobs[j] for j in held} == {"queued"}
    for job in held:
        assert probe.one("SELECT attempt FROM codity.jobs WHERE id = %s", [job]) == (0,)
        assert [(x[3], x[4]) for x in _executions(probe, job)] == [("released", True)]
    # The claim loop stopped at SIGTERM and no backlog job ran: those the worker had
    # prefetched (at most its prefetch, 3 x 5) were given back at once, uncharged.
    assert Counter(jobs[j] for j in backlog) == {"queued": 100}
    prefetched = probe.value(
        "SELECT count(*) FROM codity.job_executions WHERE job_id = ANY(%s)", [backlog]
    )
    assert 0 <= prefetched <= 15
    # Nothing held, nothing charged for a release, nothing reaped, nothing completed twice.
    assert probe.rows(
        "SELECT status::text, attempt_refunded, count(*) FROM codity.job_executions "
        "GROUP BY 1, 2 ORDER BY 1"
    ) == [("completed", False, 203), ("released", True, 2 + prefetched)]
    assert (
        probe.value("SELECT count(*) FROM codity.jobs WHERE status IN ('claimed', 'running')") == 0
    )
    assert (
        probe.value("SELECT count(*) FROM codity.jobs WHERE status = 'queued' AND attempt <> 0")
        == 0
    )
    _assert_no_job_completed_twice(probe)
    assert probe.rows("SELECT status::text FROM codity.workers") == [("stopped",)]


# -- 4. A handler that kills its own process every time ---------------------------------------


@pytest.mark.faults
def test_job_that_kills_its_worker_every_time_is_dead_lettered_at_the_crash_cap(
    probe: Probe, procs: Processes
) -> None:
    max_crashes = 3
    _queue(probe, "crash", max_crashes=max_crashes)
    [job] = _enqueue(probe, "crash", [{"task": "fault.suicide"}])
    crashed: list[int | None] = []
    started_at = time.monotonic()
    with Ticker(probe.url, interval=0.2):
        # A supervisor in miniature: restart the worker whenever it dies, until the job
        # is dead-lettered.
        worker = procs.worker("crash", name="crash-1")
        while not probe.value(
            "SELECT status = 'dead_letter' FROM codity.jobs WHERE id = %s", [job]
        ):
            assert time.monotonic() - started_at < 90, (
                f"no dead letter after {crashed}\n{procs.logs()}"
            )
            if not worker.is_running():
                crashed.append(worker.returncode)
                worker = procs.worker("crash", name=f"crash-{len(crashed) + 1}")
            time.sleep(0.05)
        # The crash loop is over: a fresh worker runs other work and leaves the job alone.
        [sentinel] = _enqueue(probe, "crash", [{"task": "fault.sleep"}])
        wait_until(
            lambda: probe.value(
                "SELECT status = 'completed' FROM codity.jobs WHERE id = %s", [sentinel]
            ),
            timeout=30,
            what="the surviving worker runs the next job",
            alive=[worker],
        )
    elapsed = time.monotonic() - started_at
    reason, attempts = probe.one(
        "SELECT reason, attempts FROM codity.dead_letters WHERE job_id = %s", [job]
    )
    _report(
        "crash-cap",
        crashes=len(crashed),
        exit_codes=crashed,
        dead_letter_after_s=round(elapsed, 1),
        reason=reason,
    )

    assert crashed == [-signal.SIGKILL] * max_crashes
    assert reason == f"crashed: lease expired {max_crashes} times (max_crashes {max_crashes})"
    assert probe.one("SELECT status::text, crash_count FROM codity.jobs WHERE id = %s", [job]) == (
        "dead_letter",
        max_crashes,
    )
    executions = _executions(probe, job)
    assert [x[3] for x in executions] == ["reaped"] * max_crashes
    assert [x[1] for x in executions] == [1] * max_crashes  # refunded: never charged twice
    assert (
        probe.value(
            "SELECT count(*) FROM public.fault_events WHERE job_id = %s AND event = 'started'",
            [job],
        )
        == max_crashes
    )
    assert [x[4] for x in executions] == [True] * (max_crashes - 1) + [False]
    assert attempts == 1


# -- 5. PostgreSQL restarted, connections killed ----------------------------------------------


@pytest.fixture(scope="module")
def own_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    """A server of this module's own, to restart without disturbing the session's.

    synchronous_commit stays on: with it off, an immediate shutdown may drop commits
    already acknowledged, which is PostgreSQL's documented trade-off, not ours to test.
    """
    bin_dir = os.environ.get("CODITY_PG_BIN")
    server = EmbeddedServer(
        tmp_path_factory.mktemp("own-pg"),
        free_port(),
        bin_dir=Path(bin_dir) if bin_dir else None,
        settings=["fsync=off", "full_page_writes=off", "max_connections=100"],
    )
    server.start()
    try:
        yield server
    finally:
        server.destroy()


@pytest.fixture
def own_db(own_server: EmbeddedServer, request: pytest.FixtureRequest) -> Iterator[str]:
    """A freshly migrated database on the module's own server, dropped afterwards."""
    name = f"faults_{abs(hash(request.node.nodeid)) % 10**8}_{os.getpid()}"
    drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
    with psycopg.connect(own_server.url("postgres"), autocommit=True) as admin:
        admin.execute(drop)
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = own_server.url(name)
    migrate(url)
    with psycopg.connect(url, autocommit=True) as conn:
        create_tables(conn)
    try:
        yield url
    finally:
        with psycopg.connect(own_server.url("postgres"), autocommit=True) as admin:
            admin.execute(drop)


def _stop_server(server: EmbeddedServer, mode: str) -> None:
    """pg_ctl stop; a failure says what the server's log says."""
    try:
        server.stop(mode=mode)
    except EmbeddedServerError as exc:
        tail = "\n".join(server.logfile.read_text(errors="replace").splitlines()[-30:])
        raise AssertionError(f"{exc}\nlast lines of {server.logfile}:\n{tail}") from exc


# fault -> (pg_ctl stop mode, seconds the server stays down). "fast" is a restart that
# takes a while (an upgrade, a failover): leases run out and backoff grows meanwhile.
FAULTS = {"fast": ("fast", 5.0), "immediate": ("immediate", 0.0)}


def _restart_or_terminate(server: EmbeddedServer, probe: Probe, fault: str) -> datetime:
    """Inject the fault; return the database's time when it accepts our connections again."""
    if fault == "terminate":
        [(killed,)] = probe.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name LIKE 'codity-%%' AND datname = current_database()"
        )
        assert killed >= 5  # a scheduler, two listeners, pooled connections
        at: datetime = probe.value("SELECT clock_timestamp()")
        return at
    mode, outage_s = FAULTS[fault]
    _stop_server(server, mode)
    time.sleep(outage_s)  # the length of the outage is the fault, not an ordering
    server.start()
    back: datetime = wait_until(
        lambda: probe.try_value("SELECT clock_timestamp()"),
        timeout=30,
        what="the server accepts connections",
    )
    return back


@pytest.mark.faults
@pytest.mark.parametrize("fault", ["fast", "immediate", "terminate"])
def test_workers_reconnect_after_restart_or_killed_connections_and_lose_no_job(
    own_server: EmbeddedServer, own_db: str, tmp_path: Path, fault: str
) -> None:
    url = own_db
    total = 600
    # A 30 s fallback poll: pickup within seconds after the fault proves the listeners
    # came back (or the claim loop's own retry), not the poll.
    with Probe(url) as probe, Processes(tmp_path, url, WORKER_POLL_INTERVAL_MS="30000") as procs:
        _queue(probe, "load", max_crashes=100)
        scheduler = procs.scheduler(200)
        workers = [procs.worker("load", name=f"worker-{i}") for i in (1, 2)]
        everyone = [scheduler, *workers]
        listeners = (
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'codity-listener'"
        )
        wait_until(
            lambda: probe.value(listeners) == 2, timeout=30, what="both listen", alive=everyone
        )
        jobs = _enqueue(
            probe, "load", [{"task": "fault.sleep", "payload": {"seconds": 0.05}}] * total
        )
        completed = "SELECT count(*) FROM codity.jobs WHERE status = 'completed'"
        wait_until(
            lambda: probe.value(completed) >= 100, timeout=60, what="load runs", alive=everyone
        )

        before = probe.value(completed)
        fault_started = time.monotonic()
        back_at = _restart_or_terminate(own_server, probe, fault)
        down_s = time.monotonic() - fault_started
        resumed_at = wait_until(
            lambda: probe.value(
                "SELECT min(claimed_at) FROM codity.job_executions WHERE claimed_at > %s",
                [back_at],
            ),
            timeout=30,
            what="pickup resumes",
            alive=everyone,
        )
        wait_until(
            lambda: probe.value(completed) == total,
            timeout=120,
            what=f"all {total} jobs complete",
            alive=everyone,
        )
        drained_at = probe.value("SELECT max(finished_at) FROM codity.jobs")
        wait_until(lambda: probe.value(listeners) == 2, timeout=30, what="listeners are back")
        # Idle now; the fallback poll is 30 s away: only a NOTIFY wakes a worker this fast.
        [late] = _enqueue(probe, "load", [{"task": "fault.sleep"}])
        wait_until(
            lambda: probe.value(
                "SELECT status = 'completed' FROM codity.jobs WHERE id = %s", [late]
            ),
            timeout=20,
            what="a job enqueued after the fault is picked up",
            alive=everyone,
        )
        pickup_s = probe.value(
            "SELECT extract(epoch FROM x.claimed_at - j.created_at) FROM codity.jobs j "
            "JOIN codity.job_executions x ON x.job_id = j.id WHERE j.id = %s",
            [late],
        )
        for process in everyone:
            process.send(signal.SIGTERM)
        codes = [p.wait(timeout=30) for p in everyone]

        reaped = probe.value("SELECT count(*) FROM codity.job_executions WHERE status = 'reaped'")
        rejected = probe.value("SELECT count(*) FROM codity.fence_rejections")
        _report(
            f"db-{fault}",
            completed_before=before,
            down_s=round(down_s, 2),
            pickup_resumed_after_back_s=round((resumed_at - back_at).total_seconds(), 2),
            all_done_after_back_s=round((drained_at - back_at).total_seconds(), 2),
            idle_pickup_after_s=round(float(pickup_s), 3),
            reaped_executions=reaped,
            fence_rejections=rejected,
            exit_codes=codes,
        )
        assert codes == [0, 0, 0], procs.logs()
        assert float(pickup_s) < 5
        assert (
            probe.value(
                "SELECT count(*) FROM codity.jobs WHERE status <> 'completed' OR id <> ALL(%s)",
                [[*jobs, late]],
            )
            == 0
        )
        assert (
            probe.value(
                "SELECT count(DISTINCT job_id) FROM codity.job_executions "
                "WHERE status = 'completed'"
            )
            == total + 1
        )
        _assert_no_job_completed_twice(probe)


@pytest.mark.faults
def test_sigterm_while_the_database_is_down_exits_and_the_reaper_recovers_the_jobs(
    own_server: EmbeddedServer, own_db: str, tmp_path: Path
) -> None:
    """A worker told to stop while PostgreSQL is unreachable cannot release its jobs.

    It must still exit (0) soon after its grace period instead of retrying forever; once
    the server is back the reaper requeues what it held, attempt refunded.
    """
    grace_s = 1.0
    with Probe(own_db) as probe, Processes(tmp_path, own_db) as procs:
        _queue(probe, "outage")
        jobs = _enqueue(
            probe, "outage", [{"task": "fault.hold", "payload": {"hold_fences": [1]}}] * 3
        )
        worker = procs.worker("outage", SHUTDOWN_GRACE_MS=str(int(grace_s * 1000)))
        wait_until(
            lambda: (
                probe.value("SELECT count(*) FROM public.fault_events WHERE event = 'started'") == 3
            ),
            timeout=30,
            what="the worker runs three jobs",
            alive=[worker],
        )
        worker_id = _worker_id(probe, worker)
        _stop_server(own_server, "fast")
        try:
            sigterm_at = time.monotonic()
            worker.send(signal.SIGTERM)
            code = worker.wait(timeout=grace_s + 30)
            exited_s = time.monotonic() - sigterm_at
        finally:
            own_server.start()
        with Ticker(own_db, interval=0.2, stale_after="1 second"):
            rescuer = procs.worker("outage", name="rescuer")
            wait_until(
                lambda: (
                    probe.value("SELECT count(*) FROM codity.jobs WHERE status = 'completed'") == 3
                ),
                timeout=30,
                what="the held jobs are requeued and completed",
                alive=[rescuer],
            )
        _report(
            "sigterm-db-down", exit_code=code, exited_after_s=round(exited_s, 2), grace_s=grace_s
        )

        assert code == 0, worker.output()
        assert exited_s < grace_s + 10, worker.output()
        for job in jobs:
            assert [(x[2] == worker_id, x[3], x[4]) for x in _executions(probe, job)] == [
                (True, "reaped", True),
                (False, "completed", False),
            ]
        assert (
            probe.value("SELECT status::text FROM codity.workers WHERE id = %s", [worker_id])
            == "dead"
        )


# -- 6. Three schedulers, hundreds of every-minute schedules ----------------------------------


DUPLICATE_CRON_JOBS = (
    "SELECT schedule_id, run_at, count(*) FROM codity.jobs GROUP BY 1, 2 HAVING count(*) > 1"
)


def _create_minutely_schedules(probe: Probe, count: int, now: datetime | None) -> None:
    """``count`` schedules of '* * * * *' in one transaction, created as of ``now``."""
    probe.execute(
        "SELECT codity.create_schedule(format('every-minute-%%s', g), 'cron', '* * * * *', "
        "'fault.sleep', p_now => coalesce(%s, now())) FROM generate_series(1, %s) AS g",
        [now, count],
    )


@pytest.mark.faults
def test_three_schedulers_ticking_across_minute_boundaries_create_one_job_per_minute(
    probe: Probe,
) -> None:
    """Three connections tick together, released by a barrier at each step of p_now.

    Time moves through tick(p_now) — five minute boundaries in seconds, not minutes. At
    every step all three transactions race for the same due schedules (each scheduler a
    millisecond apart, as three replicas' now() would be).
    """
    _queue(probe, "cron")
    schedules, t0 = 300, datetime(2031, 1, 1, 0, 0, 30, tzinfo=UTC)
    _create_minutely_schedules(probe, schedules, t0)
    steps = [t0 + timedelta(seconds=15 * k) for k in range(22)]  # 00:00:30 .. 00:05:45
    barrier = threading.Barrier(3)
    created: Counter[int] = Counter()
    errors: list[BaseException] = []

    def scheduler(index: int) -> None:
        try:
            with psycopg.connect(probe.url, autocommit=True) as conn:
                for step in steps:
                    barrier.wait(timeout=60)
                    now = step + timedelta(milliseconds=index)
                    row = conn.execute("SELECT materialized FROM codity.tick(%s)", [now]).fetchone()
                    assert row is not None
                    created[index] += row[0]
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=scheduler, args=(i,)) for i in range(3)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    elapsed = time.monotonic() - started
    assert not errors, errors
    minutes = [datetime(2031, 1, 1, 0, m, tzinfo=UTC) for m in range(1, 6)]
    _report(
        "cron-ptime",
        schedules=schedules,
        minutes=len(minutes),
        jobs_by_scheduler=sorted(created.values(), reverse=True),
        seconds=round(elapsed, 1),
    )

    assert sum(created.values()) == schedules * len(minutes)
    assert probe.rows(DUPLICATE_CRON_JOBS) == []
    per_schedule = probe.rows(
        "SELECT array_agg(run_at ORDER BY run_at), count(*) FROM codity.jobs GROUP BY schedule_id"
    )
    assert len(per_schedule) == schedules
    assert {tuple(runs) for runs, _ in per_schedule} == {tuple(minutes)}
    assert probe.rows("SELECT DISTINCT next_run_at FROM codity.scheduled_jobs") == [
        (datetime(2031, 1, 1, 0, 6, tzinfo=UTC),)
    ]


@pytest.mark.faults
def test_three_scheduler_processes_fire_a_missed_minute_once_and_skip_the_backlog(
    probe: Probe, procs: Processes
) -> None:
    """Real ``codity scheduler`` processes, real clock: schedules whose next run is minutes
    overdue appear all at once (one commit) while the three are ticking every 0.2 s."""
    _queue(probe, "cron")
    schedulers = [procs.scheduler(200, name=f"scheduler-{i}") for i in (1, 2, 3)]
    wait_until(
        lambda: (
            probe.value(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'codity-scheduler' "
                "AND datname = current_database()"
            )
            == 3
        ),
        timeout=30,
        what="three schedulers connect",
        alive=schedulers,
    )
    schedules = 300
    _create_minutely_schedules(probe, schedules, probe.value("SELECT now() - interval '3 minutes'"))
    overdue = probe.value("SELECT min(next_run_at) FROM codity.scheduled_jobs")
    created_at = probe.value("SELECT now()")
    wait_until(
        lambda: probe.value("SELECT count(DISTINCT schedule_id) FROM codity.jobs") == schedules,
        timeout=30,
        what="every schedule fires",
        alive=schedulers,
    )
    fired_after = probe.value("SELECT max(created_at) FROM codity.jobs") - created_at
    for process in schedulers:
        process.send(signal.SIGTERM)
    codes = [p.wait(timeout=15) for p in schedulers]
    _report(
        "cron-processes",
        schedules=schedules,
        all_fired_after_s=round(fired_after.total_seconds(), 2),
        exit_codes=codes,
    )

    assert codes == [0, 0, 0]
    assert probe.rows(DUPLICATE_CRON_JOBS) == []
    # The overdue occurrence fired once per schedule; the minutes missed after it did not.
    assert probe.value("SELECT count(*) FROM codity.jobs WHERE run_at = %s", [overdue]) == schedules
    assert (
        probe.value(
            "SELECT count(*) FROM codity.jobs WHERE run_at > %s AND run_at <= %s",
            [overdue, created_at],
        )
        == 0
    )
    # If a minute boundary passed while they ran, every schedule fired for it exactly once.
    later = probe.value("SELECT count(*) FROM codity.jobs WHERE run_at > %s", [created_at])
    assert later in (0, schedules)


# -- 7. `codity up --workers 3` with 1,000 jobs, then Ctrl-C ----------------------------------


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return int(response.status) == 200
    except OSError:
        return False


@pytest.mark.faults
@pytest.mark.parametrize("interrupt", ["terminal", "supervisor"])
def test_codity_up_runs_a_thousand_jobs_exactly_once_and_ctrl_c_exits_zero(
    probe: Probe, procs: Processes, interrupt: str
) -> None:
    """``terminal``: SIGINT to the whole process group, as Ctrl-C in a terminal sends it;
    ``supervisor``: SIGINT to the supervisor alone, which must stop its children itself."""
    _queue(probe, "up")
    port = free_port()
    up = procs.start(
        "up",
        ["up", "--workers", "3", "--app", APP, "--queue", "up",
         "--concurrency", "5", "--tick-ms", "200", "--port", str(port)],
        own_group=True,  # its own process group, so that Ctrl-C reaches it as a terminal's would
    )  # fmt: skip
    wait_until(
        lambda: probe.value("SELECT count(*) FROM codity.workers WHERE status = 'active'") == 3,
        timeout=60,
        what="codity up starts three workers",
        alive=[up],
    )
    wait_until(
        lambda: _answers(f"http://127.0.0.1:{port}/readyz"),
        timeout=30,
        what="codity up serves the API",
        alive=[up],
    )
    started = time.monotonic()
    jobs = _enqueue(probe, "up", [{"task": "fault.sleep", "payload": {"seconds": 0.01}}] * 1000)
    wait_until(
        lambda: probe.value("SELECT count(*) FROM codity.jobs WHERE status = 'completed'") == 1000,
        timeout=120,
        what="1,000 jobs complete",
        alive=[up],
    )
    drained_s = time.monotonic() - started
    stop_sent = time.monotonic()
    if interrupt == "terminal":
        up.send(signal.SIGINT)  # the group: the supervisor and its children
    else:
        up.send(signal.SIGINT, group=False)
    code = up.wait(timeout=60)
    stopped_s = time.monotonic() - stop_sent
    per_worker = sorted(
        (n for (n,) in probe.rows(
            "SELECT count(*) FROM codity.job_executions GROUP BY worker_id"
        )),
        reverse=True,
    )  # fmt: skip
    _report(
        f"codity-up/{interrupt}",
        jobs=len(jobs),
        seconds=round(drained_s, 2),
        per_worker=per_worker,
        exit_code=code,
        stopped_after_s=round(stopped_s, 2),
    )

    assert code == 0, up.output()
    assert (
        probe.value(
            "SELECT count(*) FROM codity.jobs WHERE status = 'completed' AND id = ANY(%s)", [jobs]
        )
        == 1000
    )
    assert (
        probe.rows("SELECT job_id FROM codity.job_executions GROUP BY job_id HAVING count(*) > 1")
        == []
    )
    assert (
        probe.value("SELECT count(*) FROM codity.job_executions WHERE status = 'completed'") == 1000
    )
    assert probe.value("SELECT count(*) FROM codity.jobs WHERE attempt <> 1") == 0
    # Every worker drained and deregistered: a clean exit, not a kill.
    assert probe.rows("SELECT status::text, count(*) FROM codity.workers GROUP BY 1") == [
        ("stopped", 3)
    ]


def test_ctrl_c_while_codity_up_is_still_starting_exits_zero(
    probe: Probe, procs: Processes
) -> None:
    """Ctrl-C right after the supervisor started its children, before they could install
    their own signal handlers: they die of the signal itself, holding nothing, and that
    is a clean stop (the supervisor used to report it as a failure, exit 1)."""
    _queue(probe, "up")
    up = procs.start(
        "up",
        ["up", "--workers", "3", "--app", APP, "--queue", "up",
         "--tick-ms", "200", "--port", str(free_port())],
        own_group=True,
    )  # fmt: skip
    wait_until(
        lambda: up.logged("started worker-3"),
        timeout=60,
        what="the supervisor starts its children",
        alive=[up],
        interval=0.01,
    )
    up.send(signal.SIGINT)
    code = up.wait(timeout=30)
    _report("codity-up/early-ctrl-c", exit_code=code)
    assert code == 0, up.output()
    assert probe.value("SELECT count(*) FROM codity.workers WHERE status = 'active'") == 0
