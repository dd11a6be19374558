"""Codity through a real failover (``./test -m failover``; issue 25, item 4).

One pg_auto_failover cluster (tests/autofailover.py: a monitor and two nodes on loopback,
tightened timeouts) serves, for the whole module, real ``codity`` processes given its
multi-host URL: three workers (``tests.failover_tasks``, whose handler records each run
durably), the scheduler, with a cron schedule firing every minute, and the web app. Each
fault test, on that running system:

1. waits for the cluster to be healthy (a primary and a secondary in sync) and enqueues
   20,000 jobs into a queue of its own (``enqueue_many``, acknowledged ids kept);
2. starts an enqueuer (20 jobs a second into a probe queue, each with an idempotency key
   and retried with the same key after an error, so a retry never makes a second job)
   and a write probe (one INSERT every 50 ms, noting which node took it);
3. once 4,000 of the drain's jobs are done, injects its fault into the primary: SIGKILL of
   the node's whole process group (keeper and PostgreSQL), ``pg_autoctl stop``, or
   ``pg_autoctl perform switchover``; a killed or stopped node is run again once writes
   are back, and rejoins as the secondary;
4. keeps enqueuing for a minute after the fault, waits for both queues to drain, and
   checks: every acknowledged enqueue is a job, completed with exactly one accepted
   completion (or dead-lettered because its handler failed: never by crashes), each
   completed job's handler recorded at least once; no ``codity`` process exited; the cron
   schedule fired once for every minute since it was made, never twice, and on time
   whenever the cluster was writable; ``/readyz`` and a dashboard page answer 200 again.

It records, prints and writes to /tmp/codity-failover-results.json: writes back (fault to
the first write acknowledged by the new primary), fault to the first completed job after
the old primary stopped taking writes, and the pickup (claim - enqueue) p50/p99/max of
the probe jobs enqueued in the minute after the fault; the first completion must come
within 5 s of writes being back.

A last test stops the secondary while the system runs and measures how long commits block
(until the monitor turns synchronous replication off), printing it only.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import signal
import statistics
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2 as httpx
import psycopg
import pytest
from psycopg.types.json import Jsonb

from codity.db import migrate
from codity.db.conninfo import conninfo
from codity.web.dashboard.session import SESSION_COOKIE
from tests.autofailover import AutoFailoverRig
from tests.failover_tasks import LONG_TABLE, TABLES
from tests.ports import free_port
from tests.processes import CodityProcess, Processes, wait_until

pytestmark = pytest.mark.failover

FAULTS = ("kill9", "stop", "switchover")
JOBS = 20_000
BATCH = 1_000
WORKERS = 3
CONCURRENCY = 10
FAULT_AFTER = 4_000
"""Drain jobs done before the fault is injected."""
PROBE_RATE = 20.0
"""Probe enqueues a second, before, during and for a minute after the fault."""
AFTER_S = 60.0
FIRST_COMPLETION_SLACK_S = 2.0
"""The first job completes within this of writes being back (issue 25's target is 1 s;
measured 0.0-0.9 s: the bound leaves room for a noisy machine, the figure is recorded)."""
WORKER_SLACK_S = 3.0
"""... and every worker completes one within this (no pool stuck on the old primary;
measured at most 1.0 s)."""
APP = "tests.failover_tasks:registry"
RESULTS = Path("/tmp/codity-failover-results.json")
PASSWORD = "failover-dashboard-password"


def _connect(url: str) -> psycopg.Connection[Any]:
    """As Codity connects (target_session_attrs=read-write on the multi-host URL), with
    2 s per host attempt."""
    return psycopg.connect(conninfo(url, connect_timeout="2"), autocommit=True)


@dataclass
class System:
    rig: AutoFailoverRig
    processes: Processes
    web: CodityProcess
    scheduler: CodityProcess
    workers: list[CodityProcess]
    web_url: str
    session_cookie: str
    schedule_id: int
    schedule_first_due: float
    outages: list[tuple[float, float]] = field(default_factory=list)
    """(fault, writes back) of every fault so far, time.time()."""
    results: dict[str, Any] = field(default_factory=dict)

    def alive(self) -> list[CodityProcess]:
        return [self.web, self.scheduler, *self.workers]

    def query(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        """Read through the multi-host URL (the primary), retried across a failover."""
        deadline = time.monotonic() + 60
        while True:
            try:
                with _connect(self.rig.url) as conn:
                    return conn.execute(sql, params).fetchall()
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def value(self, sql: str, params: Any = None) -> Any:
        return self.query(sql, params)[0][0]

    def execute(self, sql: str) -> None:
        """A statement that returns no rows (DDL), on the primary."""
        with _connect(self.rig.url) as conn:
            conn.execute(sql)


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    log_dir = tmp_path_factory.mktemp("failover-logs")
    with contextlib.ExitStack() as stack:
        rig = stack.enter_context(AutoFailoverRig())
        migrate(rig.url)
        queues = [
            f"{kind}_{fault}" for fault in (*FAULTS, "standby") for kind in ("drain", "probe")
        ]
        with _connect(rig.url) as conn:
            conn.execute(TABLES)
            for queue in [*queues, "cron"]:
                conn.execute("SELECT * FROM codity.create_queue(%s)", [queue])
            row = conn.execute(
                "SELECT schedule_id, extract(epoch FROM next_run_at)::float8 FROM "
                "codity.create_schedule('every-minute', 'cron', '* * * * *', 'failover.run')"
            ).fetchone()
            assert row is not None
        schedule_id, first_due = row
        processes = stack.enter_context(
            Processes(
                log_dir,
                rig.url,
                JWT_SECRET="failover-tests-" + "x" * 40,
                CODITY_HOME=str(log_dir / "home"),
            )
        )
        port = free_port()
        web = processes.start("web", ["web", "--host", "127.0.0.1", "--port", str(port)])
        scheduler = processes.scheduler(tick_ms=250)
        queue_args = [arg for q in [*queues, "cron"] for arg in ("--queue", q)]
        workers = [
            processes.start(
                f"worker{i}",
                ["worker", "--app", APP, *queue_args, "--concurrency", str(CONCURRENCY)],
            )
            for i in range(WORKERS)
        ]
        web_url = f"http://127.0.0.1:{port}"
        everyone = [web, scheduler, *workers]
        wait_until(
            lambda: _status(f"{web_url}/readyz") == 200,
            timeout=60,
            what="the web app ready",
            alive=everyone,
        )
        answer = httpx.post(
            f"{web_url}/api/v1/auth/register",
            json={"email": "failover@codity.test", "password": PASSWORD, "org_name": "failover"},
            timeout=30,
        )
        assert answer.status_code == 201, answer.text
        cookie = answer.json()["data"]["refresh_token"]
        live = System(
            rig, processes, web, scheduler, workers, web_url, cookie, schedule_id, first_due
        )
        wait_until(
            lambda: live.value(
                "SELECT count(*) FROM codity.workers WHERE status = 'active'"
            ) == WORKERS,
            timeout=60,
            what=f"{WORKERS} workers registered",
            alive=everyone,
        )  # fmt: skip
        yield live


def _status(url: str, cookie: str | None = None) -> int | None:
    try:
        cookies = {SESSION_COOKIE: cookie} if cookie else None
        return httpx.get(url, cookies=cookies, timeout=3, follow_redirects=False).status_code
    except httpx.TransportError:
        return None


# -- load and probes, in threads --------------------------------------------------------------


class Enqueuer(threading.Thread):
    """Enqueue one job at a time at ``rate`` per second, each with an idempotency key;
    after an error the same key is sent again (on a new connection) until acknowledged."""

    def __init__(self, url: str, queue: str, rate: float) -> None:
        super().__init__(name=f"enqueuer-{queue}", daemon=True)
        self.url, self.queue, self.rate = url, queue, rate
        self.acked: dict[str, tuple[int, float, float]] = {}
        """key -> (job id, first attempt, acknowledged), time.time()."""
        self.errors: list[tuple[float, str]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        n = 0
        next_at = time.monotonic()
        while not self.stop.is_set():
            key = f"{self.queue}-{n}"
            first = time.time()
            while True:
                try:
                    if conn is None:
                        conn = _connect(self.url)
                    row = conn.execute(
                        "SELECT job_id FROM codity.enqueue(%s, 'failover.run', "
                        "p_idempotency_key => %s)",
                        [self.queue, key],
                    ).fetchone()
                    assert row is not None
                    self.acked[key] = (row[0], first, time.time())
                    break
                except psycopg.Error as exc:
                    self.errors.append((time.time(), f"{type(exc).__name__}: {exc}"))
                    if conn is not None:
                        conn.close()
                        conn = None
                    time.sleep(0.1)
            n += 1
            next_at += 1 / self.rate
            self.stop.wait(max(0.0, next_at - time.monotonic()))
        if conn is not None:
            conn.close()


@dataclass
class Write:
    began: float
    ended: float
    port: int | None
    """The node that took the write; None: it failed."""


class WriteProbe(threading.Thread):
    """One INSERT every 50 ms through the multi-host URL, on one connection reopened
    after an error; each write's start, end and node (or failure) recorded."""

    def __init__(self, url: str) -> None:
        super().__init__(name="write-probe", daemon=True)
        self.url = url
        self.writes: list[Write] = []
        self.stop = threading.Event()

    def run(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        while not self.stop.is_set():
            began = time.time()
            try:
                if conn is None:
                    conn = _connect(self.url)
                row = conn.execute(
                    "INSERT INTO public.failover_probe DEFAULT VALUES RETURNING port"
                ).fetchone()
                assert row is not None
                self.writes.append(Write(began, time.time(), row[0]))
            except psycopg.Error:
                self.writes.append(Write(began, time.time(), None))
                if conn is not None:
                    conn.close()
                    conn = None
            self.stop.wait(0.05)
        if conn is not None:
            conn.close()

    def old_gone(self, fault: float) -> float:
        """When the old primary stopped taking writes: the first failed write after the
        fault (the fault's own time if none failed)."""
        return next((w.began for w in self.writes if w.began >= fault and w.port is None), fault)

    def back(self, fault: float, port: int) -> float | None:
        """When writes were back: the first write acknowledged by ``port`` after the old
        primary stopped taking them."""
        gone = self.old_gone(fault)
        return next((w.ended for w in self.writes if w.began >= gone and w.port == port), None)


def _enqueue_drain(url: str, queue: str) -> list[int]:
    """JOBS jobs in batches; acknowledged ids. Each batch carries idempotency keys, so one
    sent again after an error makes no second job."""
    ids: list[int] = []
    for start in range(0, JOBS, BATCH):
        jobs = [
            {"task": "failover.run", "idempotency_key": f"{queue}-{i}"}
            for i in range(start, start + BATCH)
        ]
        deadline = time.monotonic() + 60
        while True:
            try:
                with _connect(url) as conn:
                    rows = conn.execute(
                        "SELECT job_id FROM codity.enqueue_many(%s, %s) ORDER BY job_position",
                        [queue, Jsonb(jobs)],
                    ).fetchall()
                ids.extend(r[0] for r in rows)
                break
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    return ids


def _done(system: System, queue: str) -> int:
    return int(
        system.value(
            "SELECT count(*) FROM codity.jobs j JOIN codity.queues q ON q.id = j.queue_id "
            "WHERE q.name = %s AND j.status IN ('completed', 'dead_letter')",
            [queue],
        )
    )


def _percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered) + 0.5) - 1))]


# -- the checks --------------------------------------------------------------------------


def _check_jobs(system: System, ids: list[int], what: str, problems: list[str]) -> dict[str, Any]:
    """Every acknowledged id is a job, finished once: one accepted completion, or a dead
    letter whose handler failed; no completion lost. Returns the counts; what is wrong goes
    to ``problems``."""
    rows = system.query(
        """
        SELECT j.id, j.status::text,
               (SELECT count(*) FROM codity.job_executions e
                 WHERE e.job_id = j.id AND e.status = 'completed') AS accepted,
               (SELECT count(*) FROM public.failover_runs r WHERE r.job_id = j.id) AS runs,
               (SELECT d.reason FROM codity.dead_letters d WHERE d.job_id = j.id
                 ORDER BY d.id DESC LIMIT 1) AS reason
        FROM codity.jobs j WHERE j.id = ANY(%s)
        """,
        [ids],
    )
    found = {r[0]: r for r in rows}
    lost = sorted(set(ids) - set(found))
    double = [r for r in rows if r[2] > 1]
    unfinished = [r for r in rows if r[1] not in ("completed", "dead_letter")]
    completed_wrong = [r for r in rows if r[1] == "completed" and r[2] != 1]
    not_run = [r for r in rows if r[1] == "completed" and r[3] < 1]
    dead = [r for r in rows if r[1] == "dead_letter"]
    dead_bad = [r for r in dead if not str(r[4] or "").startswith("failed")]
    reruns = [r for r in rows if r[3] > 1]
    # A run the handler finished (its record is written last, durably) under a fence whose
    # execution did not end completed: the worker's completion did not stick.
    unstuck = system.query(
        """
        SELECT r.job_id, r.fence, e.status::text,
               (SELECT count(*) FROM codity.fence_rejections f
                 WHERE f.job_id = r.job_id AND f.presented_fence = r.fence) AS rejected
        FROM public.failover_runs r
        JOIN codity.job_executions e ON e.job_id = r.job_id AND e.execution_seq = r.fence
        WHERE r.job_id = ANY(%s) AND e.status <> 'completed'
        ORDER BY r.job_id
        """,
        [ids],
    )
    histories: dict[str, int] = {}
    if reruns:
        for (history,) in system.query(
            "SELECT string_agg(e.status::text || coalesce(':' || e.error, ''), ' > ' "
            "ORDER BY e.execution_seq) FROM codity.job_executions e "
            "WHERE e.job_id = ANY(%s) GROUP BY e.job_id",
            [[r[0] for r in reruns]],
        ):
            histories[history] = histories.get(history, 0) + 1
    counts = {
        "acked": len(ids),
        "lost": len(lost),
        "double_accepted": len(double),
        "unfinished": len(unfinished),
        "dead_lettered": len(dead),
        "handler_ran_twice_or_more": len(reruns),
        "their_executions": histories,
        "completions_lost": len(unstuck),
        "completions_lost_jobs": [r[0] for r in unstuck][:40],
        "completions_lost_fence_rejected": sum(1 for r in unstuck if r[3]),
    }
    failed: dict[str, list[Any]] = {
        "acknowledged enqueues lost": lost,
        "jobs with 2+ accepted completions": double,
        "jobs not finished": unfinished,
        "jobs completed without exactly one accepted completion": completed_wrong,
        "jobs completed with no handler run recorded": not_run,
        "jobs dead-lettered with no handler failure": dead_bad,
        "completions lost (the handler finished under a fence whose execution did not end "
        "completed; the job ran again)": unstuck,
    }
    for name, found_rows in failed.items():
        if found_rows:
            problems.append(f"{what}: {len(found_rows)} {name}: {found_rows[:12]}")
    return counts


def _check_cron(system: System, problems: list[str]) -> dict[str, Any]:
    """The schedule fired once for every minute since it was made (none twice, none
    missing), and within 2 s of its minute unless the cluster was failing over then."""
    now = time.time()
    rows = system.query(
        """
        SELECT split_part(j.idempotency_key, ':', 4)::bigint AS due,
               extract(epoch FROM j.created_at)::float8, j.status::text,
               (SELECT count(*) FROM codity.job_executions e
                 WHERE e.job_id = j.id AND e.status = 'completed')
        FROM codity.jobs j WHERE j.schedule_id = %s ORDER BY 1
        """,
        [system.schedule_id],
    )
    dues = [r[0] for r in rows]
    duplicates = sorted({d for d in dues if dues.count(d) > 1})
    expected = list(range(int(system.schedule_first_due), int(now - 5), 60))
    missing = sorted(set(expected) - set(dues))
    late = []
    for due, created, _, _ in rows:
        lateness = created - due
        in_outage = any(start - 1 <= due <= back + 3 for start, back in system.outages)
        if lateness > 2.0 and not in_outage:
            late.append((due, round(lateness, 2)))
    not_once = [(r[0], r[2], r[3]) for r in rows if r[0] < now - 10 and r[3] != 1]
    for name, found in {
        "cron fired twice for minutes": duplicates,
        "cron never fired for minutes": missing,
        "cron fired late (due, seconds) while the cluster was writable": late,
        "cron jobs not completed exactly once": not_once,
    }.items():
        if found:
            problems.append(f"{name}: {found} (fired: {dues})")
    return {
        "minutes": len(dues),
        "max_lateness_s": round(max((r[1] - r[0] for r in rows), default=0.0), 2),
    }


def _wait_web(system: System, fault: float) -> dict[str, Any]:
    """/readyz and the dashboard's overview answer 200 again: seconds from the fault, and
    every other answer seen before (a 500 is a bug: the app should answer 503)."""
    seen: dict[str, Any] = {}
    other: dict[str, list[int | None]] = {}
    checks = {
        "readyz": (f"{system.web_url}/readyz", None),
        "dashboard": (f"{system.web_url}/", system.session_cookie),
    }

    def answered() -> bool:
        for name, (url, cookie) in checks.items():
            if name in seen:
                continue
            status = _status(url, cookie)
            if status == 200:
                seen[name] = round(time.time() - fault, 2)
            elif status not in other.setdefault(name, []):
                other[name].append(status)
        return len(seen) == len(checks)

    wait_until(answered, timeout=90, what="/readyz and / answering 200", interval=0.2,
               alive=system.alive())  # fmt: skip
    seen["before_200"] = other
    return seen


def _heal(rig: AutoFailoverRig) -> None:
    """Run again a node an earlier test left stopped (it failed before its rejoin), then
    wait for a primary and a secondary in sync."""
    for name in rig.nodes:
        if not rig.running(name):
            rig.rejoin(name)
    rig.wait_healthy(timeout=120)


def _assert_all_running(system: System) -> None:
    exited = [(p.name, p.returncode) for p in system.alive() if p.returncode is not None]
    assert not exited, f"codity processes exited: {exited}\n{system.processes.logs()}"


def _record(system: System, name: str, figures: dict[str, Any]) -> None:
    system.results[name] = figures
    RESULTS.write_text(json.dumps(system.results, indent=2) + "\n")
    print(f"\n[failover {name}] " + json.dumps(figures))


# -- the tests -------------------------------------------------------------------------------


@pytest.mark.parametrize("fault", FAULTS)
def test_a_drain_through_a_failover_loses_nothing_and_runs_nothing_twice(
    system: System, fault: str
) -> None:
    rig = system.rig
    _heal(rig)
    _assert_all_running(system)
    old = rig.primary()
    new = rig.secondary()
    drain, probe = f"drain_{fault}", f"probe_{fault}"

    enqueued_at = time.monotonic()
    drain_ids = _enqueue_drain(rig.url, drain)
    enqueue_s = time.monotonic() - enqueued_at
    writes = WriteProbe(rig.url)
    enqueuer = Enqueuer(rig.url, probe, PROBE_RATE)
    writes.start()
    enqueuer.start()
    switching = None
    try:
        wait_until(
            lambda: _done(system, drain) >= FAULT_AFTER,
            timeout=120,
            what=f"{FAULT_AFTER} drain jobs done",
            interval=0.1,
            alive=system.alive(),
        )
        drain_started = enqueued_at
        if fault == "kill9":
            at = rig.kill_node(old)
        elif fault == "stop":
            at = rig.stop_node(old, wait=False)
        else:
            at, switching = rig.switchover()
        done_at_fault = _done(system, drain)

        back = wait_until(
            lambda: writes.back(at, rig.port(new)) or 0.0,
            timeout=90,
            what=f"writes acknowledged by {new} after the {fault} of {old}",
            interval=0.1,
            alive=system.alive(),
        )
        system.outages.append((at, back))
        if fault in ("kill9", "stop"):
            if fault == "stop":
                rig.wait(lambda: not rig.running(old), timeout=60, what=f"{old} stopped")
            rig.rejoin(old)
        else:
            assert switching is not None
            rig.finish_switchover(switching)
            switching = None
        web = _wait_web(system, at)

        # A minute of enqueues after the fault, then both queues drained.
        enqueuer.stop.wait(max(0.0, at + AFTER_S - time.time()))
    finally:
        enqueuer.stop.set()
        writes.stop.set()
        enqueuer.join(30)
        writes.join(30)
        if switching is not None:
            with contextlib.suppress(AssertionError):
                rig.finish_switchover(switching)
    probe_ids = [job for job, _, _ in enqueuer.acked.values()]
    wait_until(
        lambda: _done(system, drain) == JOBS and _done(system, probe) == len(probe_ids),
        timeout=240,
        what="the drain and the probe queue finished",
        interval=0.5,
        alive=system.alive(),
    )
    drained_s = time.monotonic() - drain_started
    healthy_s = rig.wait_healthy(timeout=120)
    assert rig.primary() == new, rig.describe()

    # Correctness.
    _assert_all_running(system)
    problems: list[str] = []
    drain_counts = _check_jobs(system, drain_ids, f"{fault}: drain", problems)
    probe_counts = _check_jobs(system, probe_ids, f"{fault}: probe enqueues", problems)
    cron = _check_cron(system, problems)
    for name, statuses in web["before_200"].items():
        if any(status is not None and status >= 500 and status != 503 for status in statuses):
            problems.append(f"{fault}: {name} answered {statuses} before 200 (want 503)")
    changed = system.query(
        "SELECT alarm, detail FROM codity.health()"
        " WHERE check_name = 'seconds_since_primary_changed'"
    )
    if not changed or not changed[0][0]:
        problems.append(f"{fault}: codity.health() does not say the primary changed: {changed}")

    # Timings.
    gone = writes.old_gone(at)
    first = system.value(
        "SELECT extract(epoch FROM min(e.finished_at))::float8 FROM codity.job_executions e "
        "WHERE e.status = 'completed' AND e.finished_at > to_timestamp(%s)",
        [gone],
    )
    # Each worker on its own: a pool that kept sessions to the old primary shows here.
    by_worker = system.query(
        "SELECT w.pid, extract(epoch FROM min(e.finished_at))::float8"
        " FROM codity.job_executions e JOIN codity.workers w ON w.id = e.worker_id"
        " WHERE e.status = 'completed' AND e.finished_at > to_timestamp(%s)"
        " AND w.pid = ANY(%s) GROUP BY w.pid",
        [gone, [p.pid for p in system.workers]],
    )
    names = {p.pid: p.name for p in system.workers}
    pickups = [
        r[0]
        for r in system.query(
            """
            SELECT extract(epoch FROM min(e.claimed_at) - j.created_at)::float8
            FROM codity.jobs j JOIN codity.job_executions e ON e.job_id = j.id
            WHERE j.id = ANY(%s) AND j.created_at BETWEEN to_timestamp(%s) AND to_timestamp(%s)
            GROUP BY j.id, j.created_at
            """,
            [probe_ids, at, at + AFTER_S],
        )
    ]
    writes_back_s = back - at
    first_completion_s = None if first is None else first - at
    figures = {
        "fault": fault,
        "old_primary": old,
        "new_primary": new,
        "drain_done_at_fault": done_at_fault,
        "enqueue_20k_s": round(enqueue_s, 2),
        "drain_total_s": round(drained_s, 1),
        "old_primary_gone_s": round(gone - at, 2),
        "writes_back_s": round(writes_back_s, 2),
        "first_completion_s": None if first_completion_s is None else round(first_completion_s, 2),
        "first_completion_by_worker_s": {names[pid]: round(t - at, 2) for pid, t in by_worker},
        "web_200_again_s": web,
        "pickup_minute_after": {
            "jobs": len(pickups),
            "p50_s": round(statistics.median(pickups), 3) if pickups else None,
            "p99_s": round(_percentile(pickups, 99), 3) if pickups else None,
            "max_s": round(max(pickups), 3) if pickups else None,
        },
        "enqueue_errors_during_fault": len(enqueuer.errors),
        "healthy_again_after_drain_s": round(healthy_s, 1),
        "drain": drain_counts,
        "probe": probe_counts,
        "cron": cron,
    }
    _record(system, fault, figures)
    assert not problems, f"{fault}:\n" + "\n".join(problems) + f"\n{json.dumps(figures)}"
    assert first_completion_s is not None, f"no job completed after the {fault}: {figures}"
    each = {names[pid]: t - at for pid, t in by_worker}
    late = {name: round(s, 2) for name, s in each.items() if s > writes_back_s + WORKER_SLACK_S}
    assert len(each) == len(system.workers) and not late, (
        f"{fault}: a worker completed nothing within {WORKER_SLACK_S}s of writes being back "
        f"at {writes_back_s:.2f}s: {late or each}"
    )
    assert first_completion_s <= writes_back_s + FIRST_COMPLETION_SLACK_S, (
        f"{fault}: first completion {first_completion_s:.2f}s after the fault, writes back "
        f"at {writes_back_s:.2f}s (target: within {FIRST_COMPLETION_SLACK_S}s of it): {figures}"
    )


LONG_JOBS = 200
LONG_S = 45.0


@pytest.mark.parametrize("lease_s", [None, 12], ids=["default-lease", "lease-12s"])
def test_long_jobs_in_flight_through_a_kill_of_the_primary_run_once(
    system: System, lease_s: int | None
) -> None:
    """Issue 25, item 3: 200 jobs of 45 s in flight on two live workers (100 slots each, no
    prefetch) when the primary is killed. Leases run on the database's clock, which went on
    while no one could heartbeat; the scheduler's grace (DESIGN_DECISIONS 63) lets the
    workers heartbeat before anything is reaped, and the workers' own lease clock (64) stops
    a handler only when its lease could really have run out.

    With the default lease (30 s, heartbeats every 5 s) an outage of ~10 s leaves every lease
    standing. Target: 0 runs of one job overlapping in time, reruns at most 1 %. With a
    12 s lease the outage outlasts the leases: the workers stop their handlers before the
    leases can run out and the jobs run again — measured, and still never two at once."""
    rig = system.rig
    _heal(rig)
    old, new = rig.primary(), rig.secondary()
    queue = "long" if lease_s is None else f"long{lease_s}"
    system.query("SELECT * FROM codity.create_queue(%s, p_lease_seconds => %s)", [queue, lease_s])
    system.execute(LONG_TABLE)
    system.execute("TRUNCATE public.failover_long_runs")
    extra = [
        system.processes.start(
            f"{queue}-{i}",
            ["worker", "--app", APP, "--queue", queue, "--concurrency", "100", "--prefetch", "0"],
        )
        for i in range(2)
    ]
    everyone = [*system.alive(), *extra]
    system.query(
        "SELECT count(*) FROM codity.enqueue_many(%s, %s)",
        [queue, Jsonb([{"task": "failover.long", "payload": {"seconds": LONG_S}}] * LONG_JOBS)],
    )
    wait_until(
        lambda: system.value("SELECT count(*) FROM public.failover_long_runs") >= LONG_JOBS,
        timeout=120,
        what=f"{LONG_JOBS} long jobs running",
        interval=0.2,
        alive=everyone,
    )
    writes = WriteProbe(rig.url)
    writes.start()
    try:
        time.sleep(1.0)
        at = rig.kill_node(old)
        back = wait_until(
            lambda: writes.back(at, rig.port(new)) or 0.0,
            timeout=90,
            what="writes back after the kill",
            interval=0.1,
            alive=everyone,
        )
        system.outages.append((at, back))
        rig.rejoin(old)
    finally:
        writes.stop.set()
        writes.join(30)
    wait_until(
        lambda: system.value(
            "SELECT count(*) FROM codity.jobs j JOIN codity.queues q ON q.id = j.queue_id"
            " WHERE q.name = %s AND j.status = 'completed'",
            [queue],
        ) == LONG_JOBS,
        timeout=240,
        what="every long job completed",
        interval=0.5,
        alive=everyone,
    )  # fmt: skip
    runs = system.query(
        "SELECT job_id, fence, began, ended, how FROM public.failover_long_runs"
        " ORDER BY job_id, began"
    )
    executions = system.query(
        "SELECT e.status::text, count(*) FROM codity.job_executions e"
        " JOIN codity.queues q ON q.id = e.queue_id WHERE q.name = %s GROUP BY 1",
        [queue],
    )
    by_job: dict[int, list[tuple[Any, ...]]] = {}
    for run in runs:
        by_job.setdefault(run[0], []).append(run)
    reruns = sum(1 for job_runs in by_job.values() if len(job_runs) > 1)
    overlaps = [
        (first, second)
        for job_runs in by_job.values()
        for first, second in itertools.pairwise(job_runs)
        if first[3] is None or second[2] < first[3]
    ]
    crashes = system.value(
        "SELECT coalesce(sum(j.crash_count), 0) FROM codity.jobs j"
        " JOIN codity.queues q ON q.id = j.queue_id WHERE q.name = %s",
        [queue],
    )
    figures = {
        "fault": "kill9 with long jobs",
        "lease_s": lease_s or 30,
        "jobs": LONG_JOBS,
        "seconds_each": LONG_S,
        "writes_back_s": round(back - at, 2),
        "reruns": reruns,
        "overlapping_runs": len(overlaps),
        "crashes_counted": crashes,
        "executions": dict(executions),
        "runs_stopped": sum(1 for run in runs if run[4] != "done"),
    }
    _record(system, queue, figures)
    for process in extra:
        assert process.returncode is None, f"{process.name} exited\n{process.output()}"
        process.send(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
    assert not overlaps, f"runs of one job overlapped: {overlaps[:5]} {figures}"
    if lease_s is None:
        assert reruns <= LONG_JOBS // 100, figures


def test_losing_the_standby_blocks_commits_until_replication_turns_async(
    system: System,
) -> None:
    """Measured, not a target: pg_auto_failover keeps commits synchronous until the monitor
    finds the secondary gone and puts the primary in wait_primary (HA.md: 2.1 s tight)."""
    rig = system.rig
    _heal(rig)
    primary, standby = rig.primary(), rig.secondary()
    writes = WriteProbe(rig.url)
    enqueuer = Enqueuer(rig.url, "probe_standby", PROBE_RATE)
    writes.start()
    enqueuer.start()
    try:
        time.sleep(2)
        at = rig.stop_node(standby, wait=True)
        wait_until(
            lambda: any(w.began > at + 1 and w.ended - w.began < 0.5 for w in writes.writes),
            timeout=60,
            what="writes flowing again after the standby stopped",
            interval=0.1,
            alive=system.alive(),
        )
        time.sleep(2)
    finally:
        writes.stop.set()
        enqueuer.stop.set()
        writes.join(30)
        enqueuer.join(30)
    after = [w for w in writes.writes if w.ended > at]
    blocked = max(w.ended - max(w.began, at) for w in after)
    failed = sum(1 for w in after if w.port is None)
    # What operators see meanwhile: the primary runs alone (codity.health, in status, on
    # the dashboard and in the metrics).
    alone = system.query(
        "SELECT alarm, detail FROM codity.health() WHERE check_name = 'synchronous_standbys'"
    )
    rig.rejoin(standby)
    healthy_s = rig.wait_healthy(timeout=120)
    assert rig.primary() == primary
    probe_ids = [job for job, _, _ in enqueuer.acked.values()]
    wait_until(
        lambda: _done(system, "probe_standby") == len(probe_ids),
        timeout=60,
        what="the standby test's probe jobs done",
        alive=system.alive(),
    )
    problems: list[str] = []
    counts = _check_jobs(system, probe_ids, "standby loss: probe enqueues", problems)
    _assert_all_running(system)
    figures = {
        "fault": "standby stopped",
        "writes_blocked_s": round(blocked, 2),
        "failed_writes": failed,
        "rejoined_healthy_s": round(healthy_s, 1),
        "probe": counts,
        "health_while_alone": alone,
    }
    _record(system, "standby", figures)
    assert not problems, "\n".join(problems)
    assert alone and alone[0][0], f"codity.health() did not say the primary runs alone: {alone}"
