"""Workflows under concurrency and crashes: issue 27's "exactly once" and "crash safety".

tests/test_workflows.py proves the mechanism (40 races of two parents); this module leans on
it with numbers, real processes and real faults, each on a real server:

- 1,000 runs of two sessions completing a child's two parents, the second blocked on the
  child's row until the first commits, both commit orders: the child is queued exactly once
  (no parent left, one NOTIFY on its queue), never zero times; with
  CODITY_FAULT=unlocked_release the same runs strand it;
- four ``codity worker`` processes drain 300 diamonds (a -> b, c -> d) over two queues:
  every node runs once, a child only after all its parents completed, nothing left waiting;
- a completion whose settlement queued the child but did not commit, its backend
  terminated: all of it rolls back (parent running, child waiting and unclaimable), and the
  completion made again releases the child once (the smoke of the default run);
- a worker SIGKILLed in a parent's handler: the reaper requeues the parent with its attempt
  refunded, the child waits, and a new worker runs the parent and then the child once;
- PostgreSQL stopped and started with a parent running on a worker: the workflow finishes,
  no node runs twice or twice at once, nothing is stranded.

Nothing is ordered by sleeping: interleavings wait for ``pg_blocking_pids``, processes are
awaited through the database. Figures print with ``-s``; docs/TESTING.md records them.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.types.json import Jsonb

from codity.db import migrate
from codity.db.embedded import EmbeddedServer
from tests.fault_tasks import create_tables
from tests.faults import inject
from tests.ports import free_port
from tests.processes import APP, CodityProcess, Probe, Processes, Ticker, wait_until
from tests.sqlapi import NO_BACKOFF, create_queue, create_queue_call, one, row
from tests.test_workflows import _enqueue, _hold, _node, _status

LEASE_S = 2
RUNS = 1_000
RELEASED_ONCE = ("queued", 0, 1)


def _report(title: str, **figures: Any) -> None:
    print(f"\n[{title}] " + ", ".join(f"{k}={v}" for k, v in figures.items()))


def _task(node: dict[str, Any], task: str, **payload: Any) -> dict[str, Any]:
    return {**node, "task": task, "payload": payload}


def _queue(probe: Probe, name: str, **policy: Any) -> int:
    [(queue,)] = probe.execute(
        *create_queue_call(name, max_attempts=3, **NO_BACKOFF, max_crashes=5, **policy)
    )
    return int(queue)


def _enqueue_nodes(probe: Probe, nodes: list[dict[str, Any]]) -> dict[str, int]:
    """A workflow of these nodes: job ids by node key."""
    found = probe.execute(
        "SELECT node_key, job_id FROM codity.enqueue_workflow(%s)", [Jsonb({"nodes": nodes})]
    )
    return {key: int(job) for key, job in found}


def _worker(procs: Processes, queues: tuple[str, ...], name: str) -> CodityProcess:
    """``codity worker`` serving every queue given, five handlers at a time."""
    served = [arg for queue in queues for arg in ("--queue", queue)]
    return procs.start(name, ["worker", "--app", APP, *served, "--concurrency", "5"])


def _worker_id(probe: Probe, process: CodityProcess) -> int:
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


def _executions(probe: Probe, job: int) -> list[tuple[Any, ...]]:
    return probe.rows(
        "SELECT execution_seq, attempt, worker_id, status::text, attempt_refunded"
        " FROM codity.job_executions WHERE job_id = %s ORDER BY execution_seq",
        [job],
    )


def _started(probe: Probe, job: int) -> list[int]:
    """The pids of the handlers that began the job, from their own trace (fault.hold)."""
    return [
        int(pid)
        for (pid,) in probe.rows(
            "SELECT pid FROM public.fault_events WHERE job_id = %s AND event = 'started'"
            " ORDER BY id",
            [job],
        )
    ]


def _state(probe: Probe, job: int) -> tuple[Any, ...]:
    return probe.one(
        "SELECT status::text, deps_remaining, attempt, crash_count FROM codity.jobs WHERE id = %s",
        [job],
    )


def _early_children(probe: Probe) -> list[tuple[Any, ...]]:
    """Edges whose child's handler began, by its own clock, before the parent's completion
    (whose finished_at is its transaction's start): none may exist. Every child node here
    runs fault.hold, which records when it begins."""
    return probe.rows(
        "SELECT d.parent_id, d.child_id FROM codity.job_deps d"
        " JOIN codity.job_executions p ON p.job_id = d.parent_id AND p.status = 'completed'"
        " JOIN public.fault_events e ON e.job_id = d.child_id AND e.event = 'started'"
        " WHERE e.at <= p.finished_at"
    )


def _inverted_records(probe: Probe) -> int:
    """Edges whose child's claimed_at is before its parent's finished_at in codity's record.
    Both are now(), the start of their transactions, and a claim that began before the
    completion still picks the child once that commits: a record of the clock, not an order
    of events, so counted and printed, never asserted."""
    return int(
        probe.value(
            "SELECT count(*) FROM codity.job_deps d"
            " JOIN codity.job_executions p ON p.job_id = d.parent_id AND p.status = 'completed'"
            " JOIN codity.job_executions c ON c.job_id = d.child_id"
            " WHERE c.claimed_at < p.finished_at"
        )
    )


def _overlapping_executions(probe: Probe) -> list[tuple[Any, ...]]:
    """Two executions (attempts ended) of one job whose spans overlap: none may exist."""
    return probe.rows(
        "SELECT a.job_id, a.execution_seq, b.execution_seq FROM codity.job_executions a"
        " JOIN codity.job_executions b ON b.job_id = a.job_id"
        "  AND b.execution_seq > a.execution_seq"
        " WHERE b.claimed_at < a.finished_at"
    )


# -- 1. 1,000 interleaved settlements ------------------------------------------------------


@dataclass
class Race:
    """The connections every run of the race reuses, and the NOTIFYs the child's queue got."""

    conn: psycopg.Connection[Any]
    listener: psycopg.Connection[Any]
    sessions: tuple[psycopg.Connection[Any], psycopg.Connection[Any]]
    worker: int
    kids: int
    pool: ThreadPoolExecutor
    woken: list[str] = field(default_factory=list)

    def woken_kids(self) -> int:
        self.listener.execute("SELECT 1")
        return self.woken.count(str(self.kids))


def _until_blocked_by(race: Race, pid: int, by: int, done: Future[Any]) -> None:
    deadline = time.monotonic() + 10
    while one(race.conn, "SELECT pg_blocking_pids(%s)", [pid]) != [by]:
        assert time.monotonic() < deadline and not done.done(), "the second did not wait"
        time.sleep(0.001)


def _settle_interleaved(race: Race, first_commits: int) -> tuple[str, int | None, int]:
    """settle_both_at_once of tests/test_workflows.py on connections kept open: one session
    completes a parent, the other's completion of the second parent blocks on the child's
    row until the first commits. The child's status and count, and its queue's NOTIFYs."""
    nodes = _enqueue(
        race.conn,
        {"nodes": [_node("p1", "wf"), _node("p2", "wf"), _node("child", "kids", "p1", "p2")]},
    )
    held = dict(_hold(race.conn, race.worker, "wf", 2))
    calls = [(race.sessions[i], nodes[p][0]) for i, p in enumerate(("p1", "p2"))]
    (first, first_job), (second, second_job) = calls if first_commits == 0 else calls[::-1]
    complete = "SELECT * FROM codity.complete(%s, %s)"
    race.woken.clear()
    first.execute(complete, [first_job, held[first_job]])
    settling = race.pool.submit(second.execute, complete, [second_job, held[second_job]])
    _until_blocked_by(race, second.info.backend_pid, first.info.backend_pid, settling)
    first.commit()
    settling.result(timeout=10)
    second.commit()
    status, remaining = _status(race.conn, nodes["child"][0])
    woken = race.woken_kids()
    deadline = time.monotonic() + 2
    while status == "queued" and woken == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
        woken = race.woken_kids()
    return status, remaining, woken


@pytest.fixture
def race(db_url: str, conn: psycopg.Connection[Any]) -> Iterator[Race]:
    create_queue(conn, "wf")
    kids = create_queue(conn, "kids")
    (worker,) = row(conn, "SELECT codity.register_worker('w', ARRAY['wf'])")
    with (  # the pool last out: a settlement still blocked ends when its sessions close
        ThreadPoolExecutor(1) as pool,
        psycopg.connect(db_url, autocommit=True) as listener,
        psycopg.connect(db_url) as a,
        psycopg.connect(db_url) as b,
    ):
        listener.execute("LISTEN codity_v1")
        found = Race(conn, listener, (a, b), int(worker), kids, pool)
        listener.add_notify_handler(lambda n: found.woken.append(n.payload))
        yield found


@pytest.mark.faults
@pytest.mark.parametrize("fault", [None, "unlocked_release"])
def test_a_thousand_interleaved_settlements_release_the_child_exactly_once(
    db_url: str, race: Race, fault: str | None
) -> None:
    """1,000 runs, each commit order 500 times: the child is queued with no parent left
    and its queue woken once, every time. Breaks when the count is taken from anything but
    the row as locked (the fault: the second count overwrites the first and the child
    waits for a parent that is done), or when both settlements may release it (two NOTIFYs)."""
    if fault:
        inject(db_url, fault)
    started = time.perf_counter()
    outcomes = Counter(_settle_interleaved(race, run % 2) for run in range(RUNS))
    seconds = time.perf_counter() - started
    wrong = RUNS - outcomes[RELEASED_ONCE]
    _report(f"race/{fault or 'no fault'}", runs=RUNS, seconds=round(seconds, 1), wrong=wrong,
            outcomes=dict(outcomes))  # fmt: skip
    if fault:
        assert wrong > 0, outcomes
    else:
        assert outcomes == {RELEASED_ONCE: RUNS}, outcomes
        assert seconds < 120


# -- 2. Four worker processes, 300 diamonds ---------------------------------------------------


@pytest.mark.faults
def test_worker_processes_run_every_node_of_many_diamonds_once_and_in_order(
    probe: Probe, procs: Processes
) -> None:
    """300 workflows a -> (b, c) -> d across two queues, four ``codity worker`` processes:
    each node completed by one execution, its handler begun once, no child begun before a
    parent completed, nothing left waiting. Breaks if a settlement released a child early
    or twice, or left one waiting (a lost count-down)."""
    diamonds = 300
    for name in ("wa", "wb"):
        _queue(probe, name)
    step: dict[str, Any] = {"hold_fences": []}  # fault.hold holding nothing: a trace of its start
    for i in range(diamonds):
        near, far = ("wa", "wb") if i % 2 == 0 else ("wb", "wa")
        _enqueue_nodes(
            probe,
            [
                _task(_node("a", near), "fault.hold", **step),
                _task(_node("b", near, "a"), "fault.hold", **step),
                _task(_node("c", far, "a"), "fault.hold", **step),
                _task(_node("d", far, "b", "c"), "fault.hold", **step),
            ],
        )
    jobs = diamonds * 4
    workers = [_worker(procs, ("wa", "wb"), f"worker-{i}") for i in range(4)]
    started = time.monotonic()
    # Nothing queued or held: nothing can change any more (only a parent's settlement
    # releases a waiting node), so the drain is over, complete or stranded.
    wait_until(
        lambda: probe.value(
            "SELECT count(*) = 0 FROM codity.jobs WHERE status IN ('queued', 'claimed', 'running')"
        ),
        timeout=240,
        what=f"the {jobs} nodes drain",
        alive=workers,
        interval=0.2,
    )
    seconds = time.monotonic() - started
    for worker in workers:
        worker.send(signal.SIGTERM)
    codes = [w.wait(timeout=30) for w in workers]
    per_worker = sorted(
        (n for (n,) in probe.rows("SELECT count(*) FROM public.fault_events GROUP BY pid")),
        reverse=True,
    )
    _report("diamonds", workflows=diamonds, nodes=jobs, seconds=round(seconds, 1),
            per_worker=per_worker, exit_codes=codes,
            claimed_before_parent_finished_in_the_record=_inverted_records(probe))  # fmt: skip

    assert codes == [0, 0, 0, 0], procs.logs()
    assert probe.rows("SELECT status::text, count(*) FROM codity.jobs GROUP BY 1") == [
        ("completed", jobs)
    ]
    assert probe.rows(
        "SELECT status::text, count(*), count(DISTINCT job_id) FROM codity.job_executions"
        " GROUP BY 1"
    ) == [("completed", jobs, jobs)]
    begun = probe.rows(
        "SELECT job_id, count(*) FROM public.fault_events WHERE event = 'started' GROUP BY 1"
    )
    assert len(begun) == jobs and {n for _, n in begun} == {1}
    assert probe.rows("SELECT resolved, count(*) FROM codity.job_deps GROUP BY 1") == [
        ("completed", diamonds * 4)
    ]
    assert probe.value("SELECT count(*) FROM codity.jobs WHERE deps_remaining <> 0") == 0
    assert _early_children(probe) == []


# -- 3. A settlement's backend terminated before its commit -----------------------------------


def test_a_settlement_killed_before_its_commit_is_undone_and_done_again_once(
    db_url: str, conn: psycopg.Connection[Any]
) -> None:
    """p1 completed; p2's completion has queued the child and holds its row lock, not yet
    committed, when its backend is terminated. Everything rolls back: p2 running as before,
    the child waiting on one parent, unclaimable, its queue never woken. Completed again, p2
    releases the child once. Breaks if the settlement committed apart from the parent's
    completion (a child queued under a parent still running) or the child were not locked."""
    create_queue(conn, "wf")
    kids = create_queue(conn, "kids")
    nodes = _enqueue(
        conn, {"nodes": [_node("p1", "wf"), _node("p2", "wf"), _node("child", "kids", "p1", "p2")]}
    )
    p1, p2, child = (nodes[k][0] for k in ("p1", "p2", "child"))
    (worker,) = row(conn, "SELECT codity.register_worker('w', ARRAY['wf', 'kids'])")
    held = dict(_hold(conn, worker, "wf", 2))
    conn.execute("SELECT * FROM codity.complete(%s, %s)", [p1, held[p1]])
    assert _status(conn, child) == ("waiting", 1)
    parent = (
        "SELECT status::text, attempt, execution_seq, worker_id, lock_expires_at, finished_at,"
        " (SELECT count(*) FROM codity.job_executions x WHERE x.job_id = j.id)"
        " FROM codity.jobs j WHERE id = %s"
    )
    before = row(conn, parent, [p2])
    complete = "SELECT accepted, job_status::text FROM codity.complete(%s, %s)"
    woken: list[str] = []
    with psycopg.connect(db_url, autocommit=True) as listener:
        listener.execute("LISTEN codity_v1")
        listener.add_notify_handler(lambda n: woken.append(n.payload))

        doomed = psycopg.connect(db_url)
        try:
            assert row(doomed, complete, [p2, held[p2]]) == (True, "completed")
            assert _status(doomed, child) == ("queued", 0)
            with pytest.raises(psycopg.errors.LockNotAvailable):
                conn.execute("SELECT 1 FROM codity.jobs WHERE id = %s FOR UPDATE NOWAIT", [child])
            assert _status(conn, child) == ("waiting", 1)
            terminated = one(
                conn, "SELECT pg_terminate_backend(%s, 10000)", [doomed.info.backend_pid]
            )
            assert terminated is True
            with pytest.raises(psycopg.OperationalError):
                doomed.execute("SELECT 1")
        finally:
            doomed.close()

        assert row(conn, parent, [p2]) == before
        assert before[:3] == ("running", 1, 1) and before[5:] == (None, 0)
        assert _status(conn, child) == ("waiting", 1)
        edge = one(conn, "SELECT resolved FROM codity.job_deps WHERE parent_id = %s", [p2])
        assert edge is None
        assert _hold(conn, worker, "kids", 10) == []
        listener.execute("SELECT 1")
        assert str(kids) not in woken

        assert row(conn, complete, [p2, held[p2]]) == (True, "completed")
        assert _status(conn, child) == ("queued", 0)
        assert _hold(conn, worker, "kids", 10) == [(child, 1)]
        assert _hold(conn, worker, "kids", 10) == []
        listener.execute("SELECT 1")
        assert woken.count(str(kids)) == 1


# -- 4. A worker SIGKILLed in a parent's handler ----------------------------------------------


@pytest.mark.faults
def test_a_parent_whose_worker_is_sigkilled_is_reaped_and_its_child_runs_once(
    probe: Probe, procs: Processes
) -> None:
    """p1 done, p2's handler holding when its worker is SIGKILLed. Once the lease (2 s) runs
    out, reap requeues p2 with its attempt refunded while the child still waits on it; a new
    worker runs p2, then the child, once. Breaks if a crash settled the parent (the child
    released without p2 done) or lost its edge (the child waiting forever)."""
    _queue(probe, "wf", lease_seconds=LEASE_S)
    _queue(probe, "kids", lease_seconds=LEASE_S)
    nodes = _enqueue_nodes(
        probe,
        [
            _task(_node("p1", "wf"), "fault.sleep"),
            _task(_node("p2", "wf"), "fault.hold", hold_fences=[1]),
            _task(_node("child", "kids", "p1", "p2"), "fault.hold", hold_fences=[]),
        ],
    )
    p1, p2, child = nodes["p1"], nodes["p2"], nodes["child"]
    victim = _worker(procs, ("wf", "kids"), "victim")
    wait_until(
        lambda: _started(probe, p2) == [victim.pid] and _state(probe, p1)[0] == "completed",
        timeout=30,
        what="p1 done and p2 held by the victim",
        alive=[victim],
    )
    victim_id = _worker_id(probe, victim)
    assert _state(probe, child) == ("waiting", 1, 0, 0)
    victim.send(signal.SIGKILL)
    assert victim.wait(timeout=10) == -signal.SIGKILL

    killed_at = time.monotonic()
    reaped = wait_until(
        lambda: probe.execute("SELECT job_id, outcome FROM codity.reap()"),
        timeout=LEASE_S + 20,
        what="the reaper requeues p2",
        interval=0.1,
    )
    reaped_s = time.monotonic() - killed_at
    assert [job for job, _ in reaped] == [p2], reaped
    assert _state(probe, p2) == ("queued", 0, 0, 1)
    assert _executions(probe, p2) == [(1, 1, victim_id, "reaped", True)]
    assert _state(probe, child) == ("waiting", 1, 0, 0)
    assert _executions(probe, child) == []
    assert probe.value("SELECT resolved FROM codity.job_deps WHERE parent_id = %s", [p2]) is None

    rescuer = _worker(procs, ("wf", "kids"), "rescuer")
    wait_until(
        lambda: _state(probe, child)[0] == "completed",
        timeout=30,
        what="the rescuer runs p2 and then the child",
        alive=[rescuer],
    )
    rescuer_id = _worker_id(probe, rescuer)
    rescuer.send(signal.SIGTERM)
    assert rescuer.wait(timeout=30) == 0, rescuer.output()
    _report("sigkill-parent", lease_s=LEASE_S, reaped_after_kill_s=round(reaped_s, 2))

    assert _executions(probe, p2) == [
        (1, 1, victim_id, "reaped", True),
        (2, 1, rescuer_id, "completed", False),
    ]
    assert _state(probe, p2) == ("completed", 0, 1, 1)
    assert _executions(probe, child) == [(1, 1, rescuer_id, "completed", False)]
    assert _state(probe, child) == ("completed", 0, 1, 0)
    assert _started(probe, child) == [rescuer.pid]
    assert _early_children(probe) == []


# -- 5. PostgreSQL restarted mid-flight --------------------------------------------------------


@pytest.fixture(scope="module")
def own_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EmbeddedServer, str]]:
    """A server of this module's own, to restart without disturbing the session's, and a
    migrated database on it to clone (synchronous_commit on: an immediate stop must keep
    every commit acknowledged, as tests/test_process_faults.py explains)."""
    bin_dir = os.environ.get("CODITY_PG_BIN")
    server = EmbeddedServer(
        tmp_path_factory.mktemp("own-pg"),
        free_port(),
        bin_dir=Path(bin_dir) if bin_dir else None,
        settings=["fsync=off", "full_page_writes=off", "max_connections=100"],
    )
    server.start()
    try:
        template = "workflow_template"
        with psycopg.connect(server.url("postgres"), autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(template)))
        migrate(server.url(template))
        yield server, template
    finally:
        server.destroy()


@pytest.fixture
def own_db(own_server: tuple[EmbeddedServer, str]) -> Iterator[str]:
    """A database of this test's own on the module's server, cloned from its template."""
    server, template = own_server
    name = f"workflow_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server.url("postgres"), autocommit=True) as admin:
        admin.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(template)
            )
        )
    url = server.url(name)
    with psycopg.connect(url, autocommit=True) as conn:
        create_tables(conn)
    try:
        yield url
    finally:
        with psycopg.connect(server.url("postgres"), autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


# pg_ctl stop mode -> seconds the server stays down: "fast" outlasts the lease.
RESTARTS = {"fast": 5.0, "immediate": 0.0}


def _restart(server: EmbeddedServer, probe: Probe, mode: str) -> datetime:
    """Stop and start the server; the database's time once it answers again."""
    server.stop(mode=mode)
    time.sleep(RESTARTS[mode])  # the outage's length is the fault, not an ordering
    server.start()
    back: datetime = wait_until(
        lambda: probe.try_value("SELECT clock_timestamp()"),
        timeout=30,
        what="the server accepts connections",
    )
    return back


@pytest.mark.faults
@pytest.mark.parametrize("mode", list(RESTARTS))
def test_a_workflow_mid_flight_finishes_once_after_a_server_restart(
    own_server: tuple[EmbeddedServer, str], own_db: str, tmp_path: Path, mode: str
) -> None:
    """p1 completed, p2 running on a worker (a 4 s handler), the child waiting, when the
    server stops ("fast" for 5 s, past the 2 s lease, or "immediate": a crash, recovered
    from WAL). Afterwards p2 completes once, charged one attempt, no job's executions
    overlap, the child begins once and only after p2 completed, and no job, execution or
    edge is left open. Breaks if recovery or the reaper lost the child's count-down, or ran
    a node twice at once."""
    server, _ = own_server
    with Probe(own_db) as probe, Processes(tmp_path, own_db) as procs:
        _queue(probe, "wf", lease_seconds=LEASE_S)
        _queue(probe, "kids", lease_seconds=LEASE_S)
        nodes = _enqueue_nodes(
            probe,
            [
                _task(_node("p1", "wf"), "fault.sleep"),
                _task(_node("p2", "wf"), "fault.sleep", seconds=4),
                _task(_node("child", "kids", "p1", "p2"), "fault.hold", hold_fences=[]),
            ],
        )
        p1, p2, child = nodes["p1"], nodes["p2"], nodes["child"]
        worker = _worker(procs, ("wf", "kids"), "worker")
        with Ticker(own_db, interval=0.2):
            wait_until(
                lambda: _state(probe, p1)[0] == "completed" and _state(probe, p2)[0] == "running",
                timeout=30,
                what="p1 done and p2 running",
                alive=[worker],
            )
            assert _state(probe, child) == ("waiting", 1, 0, 0)
            back_at = _restart(server, probe, mode)
            wait_until(
                lambda: probe.try_value(
                    "SELECT status = 'completed' FROM codity.jobs WHERE id = %s", [child]
                ),
                timeout=60,
                what="the workflow finishes",
                alive=[worker],
            )
        worker.send(signal.SIGTERM)
        code = worker.wait(timeout=30)
        p2_runs = probe.rows(
            "SELECT status::text, finished_at FROM codity.job_executions WHERE job_id = %s"
            " ORDER BY execution_seq",
            [p2],
        )
        _report(f"restart/{mode}", outage_s=RESTARTS[mode],
                p2_executions=[status for status, _ in p2_runs], exit_code=code)  # fmt: skip

        assert code == 0, worker.output()
        [(_, p2_done_at)] = [r for r in p2_runs if r[0] == "completed"]
        assert p2_done_at > back_at
        assert {status for status, _ in p2_runs} <= {"completed", "reaped", "released"}
        assert _overlapping_executions(probe) == []
        done = probe.rows(
            "SELECT j.status::text, j.deps_remaining,"
            " count(*) FILTER (WHERE x.status = 'completed') FROM codity.jobs j"
            " JOIN codity.job_executions x ON x.job_id = j.id GROUP BY j.id, 1, 2"
        )
        assert done == [("completed", 0, 1)] * 3
        assert [x[3] for x in _executions(probe, child)] == ["completed"]
        assert _state(probe, p2)[:3] == ("completed", 0, 1)
        assert _started(probe, child) == [worker.pid]
        assert probe.rows("SELECT resolved FROM codity.job_deps ORDER BY parent_id") == [
            ("completed",),
            ("completed",),
        ]
        assert _early_children(probe) == []
