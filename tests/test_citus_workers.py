"""Real ``codity worker`` processes on a real Citus 14 cluster (a coordinator and two worker
nodes on loopback): the seed's Reliability guarantees, where the queues live on other nodes
than the one the workers connect to.

Every process connects to the coordinator (as users do); the queues' shards are on the two
worker nodes, and each test checks that its queues really are spread over both. Nothing is
ordered by sleeping: the tests poll the coordinator (tests/processes.py). Figures print with
``-s``.

- The claim storm: 10 workers serving 8 queues drain 10,000 jobs; every job runs once (the
  handlers' own record, read back from their files) and the database agrees (one execution,
  attempt 1, fence 1, no rejection), and every worker takes jobs of queues on both nodes.
- SIGKILL mid-job: the reaper (``codity.tick`` on the coordinator) requeues the job with its
  attempt refunded, and another worker completes it once.
- A zombie: a worker frozen past its lease comes back and completes the job another worker
  now runs; the completion is refused by the fence and recorded in fence_rejections.
- LISTEN/NOTIFY: a job enqueued through the coordinator wakes an idle worker whose next poll
  is a minute away.
- Tenants: one worker serving a queue of each of two projects, on different nodes, registers
  once in each and runs each job once under its own project's registration.

Break it: ``CODITY_FAULT=<name> ./test -m citus tests/test_citus_workers.py`` injects a fault
of tests/faults.py into each test's database (then takes back the claim's plan setting, as
``migrate --citus`` does): ``naive_claim`` for the storm, ``no_refund`` for the SIGKILL test,
``no_fence`` for the zombie.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest
from psycopg.types.json import Jsonb

from codity.db import citus as citus_distribution
from codity.worker import JobContext, Registry, WorkerConfig
from tests.citus import CitusCluster
from tests.fault_tasks import create_tables
from tests.faults import inject
from tests.processes import CodityProcess, Probe, Processes, Ticker, wait_until
from tests.sqlapi import NO_BACKOFF, create_queue_call, enqueue_many_call
from tests.worker_runs import run_worker_until

pytestmark = pytest.mark.citus

LEASE_S = 2
FAULT_APP = "tests.fault_tasks:registry"
STORM_APP = "tests.test_citus_workers:registry"

# -- the storm's handler: each run leaves a line in its worker's own file ---------------------

registry = Registry()


@registry.task("storm.note")
def note(payload: Any, ctx: JobContext) -> None:
    """Append ``job fence`` to this process's file in CODITY_STORM_DIR: the client-side
    record of every job a handler was handed, independent of the database."""
    with open(Path(os.environ["CODITY_STORM_DIR"]) / f"{os.getpid()}.ran", "a") as out:
        out.write(f"{ctx.job_id} {ctx.fence}\n")


# -- fixtures and helpers -----------------------------------------------------------------------


def _dbname(url: str) -> str:
    return urlsplit(url).path.lstrip("/")


@pytest.fixture
def cluster_url(citus_db_url: str) -> str:
    """This test's distributed database, with the fault CODITY_FAULT names, if any."""
    fault = os.environ.get("CODITY_FAULT")
    if fault:
        inject(citus_db_url, fault)
        with psycopg.connect(citus_db_url, autocommit=True) as conn, conn.transaction():
            citus_distribution.adjust_functions(conn)
    return citus_db_url


@pytest.fixture
def probe(cluster_url: str) -> Iterator[Probe]:
    with psycopg.connect(cluster_url, autocommit=True) as conn:
        create_tables(conn)  # fault_events, fault_gates: local tables on the coordinator
    with Probe(cluster_url) as p:
        yield p


@pytest.fixture
def procs(tmp_path: Path, cluster_url: str) -> Iterator[Processes]:
    with Processes(tmp_path, cluster_url) as processes:
        yield processes


def _queues_on_both_nodes(
    cluster: CitusCluster, probe: Probe, names: list[str], **policy: Any
) -> dict[str, tuple[int, int]]:
    """Create the queues; each name's (queue id, port of the node holding its shards). The
    test needs them spread: it fails if they are not on both worker nodes."""
    workers = {w.port for w in cluster.workers}
    for attempt in range(20):
        queues: dict[str, tuple[int, int]] = {}
        for name in names:
            [(queue_id,)] = probe.execute(*create_queue_call(name, **policy))
            port = cluster.node_port_of(_dbname(probe.url), "codity.jobs", queue_id)
            queues[name] = (int(queue_id), port)
        ports = {port for _, port in queues.values()}
        if len(names) == 1 or ports == workers:
            assert ports <= workers, queues
            return queues
        # The ids drawn hash onto one node: again, one id further on.
        for name in names:
            probe.execute("SELECT codity.delete_queue(%s, p_force => true)", [name])
        probe.execute(*create_queue_call(f"spacer-{attempt}"))
    raise AssertionError(f"no ids spread the queues over both nodes: {queues}")


def _enqueue(probe: Probe, queue: str, jobs: list[dict[str, Any]]) -> list[int]:
    return [int(r[0]) for r in probe.execute(*enqueue_many_call(queue, jobs))]


def _worker_id(probe: Probe, process: CodityProcess) -> int:
    found = wait_until(
        lambda: probe.value(
            "SELECT coalesce(max(id), 0) FROM codity.workers WHERE pid = %s AND status = 'active'",
            [process.pid],
        ),
        timeout=60,
        what=f"{process.name} registers",
        alive=[process],
    )
    return int(found)


def _event(probe: Probe, job_id: int, fence: int, event: str) -> Any:
    return probe.value(
        "SELECT max(pid) FROM public.fault_events WHERE job_id = %s AND fence = %s AND event = %s",
        [job_id, fence, event],
    )


def _executions(probe: Probe, queue_id: int, job_id: int) -> list[tuple[Any, ...]]:
    return probe.rows(
        "SELECT execution_seq, attempt, worker_id, status::text, attempt_refunded"
        " FROM codity.job_executions WHERE queue_id = %s AND job_id = %s ORDER BY execution_seq",
        [queue_id, job_id],
    )


def _job_done(probe: Probe, queue_id: int, job_id: int) -> bool:
    return bool(
        probe.value(
            "SELECT status = 'completed' FROM codity.jobs WHERE queue_id = %s AND id = %s",
            [queue_id, job_id],
        )
    )


def _report(title: str, **figures: Any) -> None:
    print(f"\n[{title}] " + ", ".join(f"{k}={v}" for k, v in figures.items()))


# -- 1. the claim storm ---------------------------------------------------------------------------

STORM_WORKERS = 10
STORM_QUEUES = 8
STORM_JOBS = 10_000


def test_ten_workers_drain_ten_thousand_jobs_over_eight_queues_on_two_nodes_each_once(
    citus_cluster: CitusCluster, probe: Probe, procs: Processes, tmp_path: Path
) -> None:
    """10 ``codity worker`` processes (concurrency 5), each serving all 8 queues, are up and
    idle when the 10,000 jobs arrive in one commit, so all of them claim at once. Two
    detectors: each handler's own line per run (client side) and the database's executions,
    attempts, fences and rejections."""
    names = [f"storm-{n}" for n in range(STORM_QUEUES)]
    queues = _queues_on_both_nodes(citus_cluster, probe, names)
    ran_dir = tmp_path / "ran"
    ran_dir.mkdir()
    queue_args = [arg for name in names for arg in ("--queue", name)]
    workers = [
        procs.start(
            f"worker-{n}",
            ["worker", "--app", STORM_APP, *queue_args, "--concurrency", "5"],
            settings={"CODITY_STORM_DIR": str(ran_dir)},
        )
        for n in range(STORM_WORKERS)
    ]
    wait_until(
        lambda: (
            probe.value("SELECT count(*) FROM codity.workers WHERE status = 'active'")
            == STORM_WORKERS
        ),
        timeout=120,
        what="ten workers register",
        alive=workers,
    )
    per_queue = STORM_JOBS // STORM_QUEUES
    with psycopg.connect(probe.url, autocommit=True) as conn, conn.transaction():
        for name in names:
            conn.execute(
                *enqueue_many_call(
                    name, [{"task": "storm.note", "payload": {"n": n}} for n in range(per_queue)]
                )
            )
    began = time.monotonic()
    wait_until(
        lambda: (
            probe.value("SELECT count(*) FROM codity.jobs WHERE status = 'completed'") == STORM_JOBS
        ),
        timeout=300,
        interval=0.5,
        what="every job completed",
        alive=workers,
    )
    seconds = time.monotonic() - began
    for worker in workers:
        worker.send(signal.SIGTERM)
    codes = [worker.wait(timeout=60) for worker in workers]

    # Client side: every line a handler wrote, from every worker's file.
    ran: Counter[int] = Counter()
    fences: Counter[int] = Counter()
    for path in ran_dir.glob("*.ran"):
        for line in path.read_text().splitlines():
            job, fence = line.split()
            ran[int(job)] += 1
            fences[int(fence)] += 1
    all_jobs = {int(r[0]) for r in probe.rows("SELECT id FROM codity.jobs")}
    # Database side, counted apart from the client.
    # (Citus refuses subqueries in an aggregate's target list: one query per count.)
    db = (
        *probe.one(
            "SELECT count(*), count(*) FILTER (WHERE status <> 'completed'),"
            " count(*) FILTER (WHERE attempt <> 1), max(execution_seq) FROM codity.jobs"
        ),
        *probe.one(
            "SELECT count(*), count(*) FILTER (WHERE status <> 'completed')"
            " FROM codity.job_executions"
        ),
        probe.value(
            "SELECT count(*) FROM (SELECT job_id FROM codity.job_executions"
            " GROUP BY queue_id, job_id HAVING count(*) > 1) several"
        ),
        probe.value("SELECT count(*) FROM codity.fence_rejections"),
    )
    by_worker = probe.rows(
        "SELECT worker_id, count(*), array_agg(DISTINCT queue_id ORDER BY queue_id)"
        " FROM codity.job_executions GROUP BY worker_id ORDER BY worker_id"
    )
    node_of = {queue_id: port for queue_id, port in queues.values()}
    nodes_per_worker = [len({node_of[q] for q in queue_ids}) for _, _, queue_ids in by_worker]
    _report(
        "storm",
        jobs=STORM_JOBS,
        seconds=round(seconds, 1),
        jobs_per_s=round(STORM_JOBS / seconds),
        handed_out=sum(ran.values()),
        distinct=len(ran),
        most_runs_of_one_job=max(ran.values(), default=0),
        per_worker=[n for _, n, _ in by_worker],
        per_node=dict(
            Counter(node_of[q] for (q,) in probe.rows("SELECT queue_id FROM codity.jobs"))
        ),
        exit_codes=codes,
    )

    assert sum(ran.values()) == STORM_JOBS, "a handler ran a job twice, or missed one"
    assert max(ran.values()) == 1 and set(ran) == all_jobs
    assert fences == {1: STORM_JOBS}
    # jobs, not completed, attempt <> 1, max fence; executions, not completed;
    # jobs with several executions; fence rejections.
    assert db == (STORM_JOBS, 0, 0, 1, STORM_JOBS, 0, 0, 0)
    assert len(by_worker) == STORM_WORKERS, by_worker
    assert nodes_per_worker == [2] * STORM_WORKERS, "every worker took jobs from both nodes"
    assert codes == [0] * STORM_WORKERS


# -- 2. SIGKILL mid-job -------------------------------------------------------------------------


def test_sigkilled_worker_job_is_reaped_refunded_and_completed_once_on_the_cluster(
    citus_cluster: CitusCluster, probe: Probe, procs: Processes
) -> None:
    """The victim's handler holds the job (fence 1) when it is SIGKILLed; the reaper, run by
    ``codity.tick`` on the coordinator, requeues the job on its worker node with the attempt
    refunded, and the idle rescuer completes it (fence 2)."""
    [(queue_id, _)] = _queues_on_both_nodes(
        citus_cluster,
        probe,
        ["kill"],
        max_attempts=3,
        **NO_BACKOFF,
        lease_seconds=LEASE_S,
        max_crashes=5,
    ).values()
    [job] = _enqueue(probe, "kill", [{"task": "fault.hold", "payload": {"hold_fences": [1]}}])
    victim = procs.worker("kill", name="victim")
    with Ticker(probe.url, interval=0.2) as ticker:
        wait_until(
            lambda: _event(probe, job, 1, "started") == victim.pid,
            timeout=60,
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
            lambda: _job_done(probe, queue_id, job),
            timeout=60,
            what="the job completes on the rescuer",
            alive=[rescuer],
        )
    assert ticker.errors == []
    reaped_at, claimed_again_at = probe.one(
        "SELECT r.finished_at, c.claimed_at FROM codity.job_executions r"
        " JOIN codity.job_executions c ON c.queue_id = r.queue_id AND c.job_id = r.job_id"
        " WHERE r.queue_id = %s AND r.job_id = %s AND r.execution_seq = 1"
        " AND c.execution_seq = 2",
        [queue_id, job],
    )
    requeue_s = (reaped_at - killed_at).total_seconds()
    _report(
        "sigkill",
        requeued_after_kill_s=round(requeue_s, 2),
        reclaimed_after_requeue_s=round((claimed_again_at - reaped_at).total_seconds(), 3),
        lease_s=LEASE_S,
    )

    assert _executions(probe, queue_id, job) == [
        (1, 1, victim_id, "reaped", True),
        (2, 1, rescuer_id, "completed", False),
    ]
    assert probe.one(
        "SELECT status::text, attempt, crash_count FROM codity.jobs"
        " WHERE queue_id = %s AND id = %s",
        [queue_id, job],
    ) == ("completed", 1, 1)
    assert "lease expired" in probe.value(
        "SELECT error FROM codity.job_executions"
        " WHERE queue_id = %s AND job_id = %s AND execution_seq = 1",
        [queue_id, job],
    )
    assert requeue_s < LEASE_S + 0.2 + 5
    assert _event(probe, job, 2, "started") == rescuer.pid


# -- 3. a zombie's late completion ----------------------------------------------------------------


def test_zombie_completion_after_sigcont_is_refused_by_the_fence_on_the_cluster(
    citus_cluster: CitusCluster, probe: Probe, procs: Processes
) -> None:
    """The first worker is SIGSTOPped while its handler holds the job; the reaper requeues
    it, another worker takes it over (fence 2) and is still running it when the frozen one,
    thawed, completes with fence 1. Only the fence can refuse that call (the job is running):
    refused, recorded in fence_rejections, and the new owner's completion is the one kept."""
    [(queue_id, _)] = _queues_on_both_nodes(
        citus_cluster,
        probe,
        ["freeze"],
        max_attempts=3,
        **NO_BACKOFF,
        lease_seconds=LEASE_S,
        max_crashes=5,
    ).values()
    [job] = _enqueue(probe, "freeze", [{"task": "fault.hold", "payload": {"gate": "open-{fence}"}}])
    # The frozen worker heartbeats once a minute, so its first report after SIGCONT is the
    # completion itself; the dead-worker threshold must allow it.
    probe.execute("SELECT codity.configure(interval '5 minutes')")
    frozen = procs.worker("freeze", name="frozen", WORKER_HEARTBEAT_MS="60000")
    with Ticker(probe.url, interval=0.2) as ticker:
        wait_until(
            lambda: _event(probe, job, 1, "started") == frozen.pid,
            timeout=60,
            what="the first worker starts the job",
            alive=[frozen],
        )
        frozen_id = _worker_id(probe, frozen)
        frozen.send(signal.SIGSTOP)
        other = procs.worker("freeze", name="other")
        other_id = _worker_id(probe, other)
        wait_until(
            lambda: _event(probe, job, 2, "started") == other.pid,
            timeout=60,
            what="the other worker takes the job over",
            alive=[other],
        )
        probe.execute("INSERT INTO public.fault_gates VALUES ('open-1')")
        frozen.send(signal.SIGCONT)
        rejections = wait_until(
            lambda: probe.rows(
                "SELECT call, worker_id, presented_fence, current_fence, job_status::text"
                " FROM codity.fence_rejections WHERE job_id = %s",
                [job],
            ),
            timeout=30,
            what="the stale completion is refused",
            alive=[frozen],
        )
        probe.execute("INSERT INTO public.fault_gates VALUES ('open-2')")
        wait_until(
            lambda: _job_done(probe, queue_id, job),
            timeout=60,
            what="the other worker completes the job",
            alive=[other],
        )
        for process in (frozen, other):
            process.send(signal.SIGTERM)
            assert process.wait(timeout=30) == 0
    assert ticker.errors == []
    _report("zombie", rejections=rejections)

    # Thawed, the frozen worker either finishes the handler first (its gate is open) and
    # sends the completion, or first finds on its own clock that the lease ran out, stops
    # the handler and gives the job back (DESIGN_DECISIONS 64): the fence refuses either.
    told_or_gate = _event(probe, job, 1, "told") or _event(probe, job, 1, "gate")
    assert told_or_gate == frozen.pid
    [(call, *refused)] = rejections
    assert call in ("complete", "release") and refused == [frozen_id, 1, 2, "running"]
    assert _executions(probe, queue_id, job) == [
        (1, 1, frozen_id, "reaped", True),
        (2, 1, other_id, "completed", False),
    ]
    assert probe.value(
        "SELECT result FROM codity.job_executions"
        " WHERE queue_id = %s AND job_id = %s AND status = 'completed'",
        [queue_id, job],
    ) == {"pid": other.pid, "fence": 2}


# -- 4. LISTEN/NOTIFY ---------------------------------------------------------------------------


def test_enqueue_through_the_coordinator_wakes_an_idle_worker_before_its_poll(
    citus_cluster: CitusCluster, probe: Probe, procs: Processes
) -> None:
    """Workers poll every 60 s here, so only the NOTIFY of the enqueue (raised on the
    coordinator, where the worker listens) can start the job within seconds. Five jobs, one
    at a time, each into a queue on one node or the other."""
    queues = _queues_on_both_nodes(citus_cluster, probe, ["wake-a", "wake-b"])
    worker = procs.start(
        "worker",
        ["worker", "--app", FAULT_APP, "--queue", "wake-a", "--queue", "wake-b"],
        settings={"WORKER_POLL_INTERVAL_MS": "60000"},
    )
    _worker_id(probe, worker)
    wait_until(
        lambda: probe.value(
            "SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE datname = current_database()"
            " AND application_name = 'codity-listener' AND query LIKE 'LISTEN%%'"
        ),
        timeout=60,
        what="the worker listens",
        alive=[worker],
    )
    # Past the claim every worker makes when its listener (re)connects.
    wait_until(
        lambda: (
            probe.value(
                "SELECT count(*) FROM pg_catalog.pg_stat_activity"
                " WHERE datname = current_database()"
                " AND application_name = 'codity-worker' AND state = 'active'"
            )
            == 0
        ),
        timeout=30,
        what="the worker idles",
        alive=[worker],
    )
    pickups = []
    for n in range(5):
        name = "wake-a" if n % 2 == 0 else "wake-b"
        queue_id = queues[name][0]
        [job] = _enqueue(probe, name, [{"task": "fault.sleep", "payload": {}}])
        wait_until(
            lambda: _job_done(probe, queue_id, job),  # noqa: B023 - called before the next turn
            timeout=10,
            interval=0.01,
            what=f"job {n} is picked up without waiting for the poll",
            alive=[worker],
        )
        pickups.append(
            probe.value(
                "SELECT extract(epoch FROM x.claimed_at - j.created_at) * 1000"
                " FROM codity.jobs j JOIN codity.job_executions x"
                "  ON x.queue_id = j.queue_id AND x.job_id = j.id"
                " WHERE j.queue_id = %s AND j.id = %s",
                [queue_id, job],
            )
        )
    _report("notify", pickup_ms=[round(float(ms), 1) for ms in pickups])
    assert all(float(ms) < 5000 for ms in pickups), pickups


# -- 5. one worker, two tenants ------------------------------------------------------------------


def test_one_worker_serves_two_projects_whose_queues_live_on_different_nodes(
    citus_cluster: CitusCluster, cluster_url: str
) -> None:
    """``--queue first/mail --queue second/mail`` on the cluster: the worker finds each
    project by slug through the coordinator (codity.find_project reads a reference table),
    registers once in each, and runs each project's jobs once, under that project's row,
    from shards on both worker nodes."""
    with psycopg.connect(cluster_url, autocommit=True) as conn:
        projects = {
            slug: int(
                conn.execute(
                    "INSERT INTO codity.projects (org_id, slug, name)"
                    " SELECT org_id, %s, %s FROM codity.projects WHERE is_default RETURNING id",
                    [slug, slug],
                ).fetchone()[0]  # type: ignore[index]
            )
            for slug in ("first", "second")
        }
        ports: dict[str, int] = {}
        for slug, project in projects.items():
            for spacer in range(20):  # until the two queues hash onto different nodes
                [queue_id] = conn.execute(
                    "SELECT queue_id FROM codity.create_queue('mail', p_project_id => %s)",
                    [project],
                ).fetchone()  # type: ignore[misc]
                ports[slug] = citus_cluster.node_port_of(
                    _dbname(cluster_url), "codity.jobs", queue_id
                )
                if slug == "first" or ports["second"] != ports["first"]:
                    break
                conn.execute("SELECT codity.delete_queue('mail', %s, true)", [project])
                conn.execute(
                    "SELECT codity.create_queue(%s, p_project_id => %s)",
                    [f"spacer-{spacer}", project],
                )
            conn.execute(
                "SELECT count(*) FROM codity.enqueue_many('mail', %s, %s)",
                [Jsonb([{"task": "t"}] * 30), project],
            )
        assert ports["first"] != ports["second"], ports
    ran: Counter[int] = Counter()
    tenants = Registry()

    @tenants.task("t")
    async def handler(payload: Any, ctx: JobContext) -> None:
        ran[ctx.job_id] += 1

    config = WorkerConfig(queues=("first/mail", "second/mail"), concurrency=4, heartbeat_s=1.0)
    run_worker_until(cluster_url, tenants, config, lambda: len(ran) >= 60, within=120)
    assert set(ran.values()) == {1}, ran
    with psycopg.connect(cluster_url, autocommit=True) as conn:
        crossed = conn.execute(
            "SELECT count(*) FROM codity.job_executions e"
            " JOIN codity.queues q ON q.id = e.queue_id"
            " JOIN codity.workers w ON w.id = e.worker_id"
            " WHERE w.project_id <> q.project_id"
        ).fetchone()
        registered = conn.execute(
            "SELECT array_agg(project_id ORDER BY project_id) FROM codity.workers"
        ).fetchone()
    assert crossed == (0,), crossed
    assert registered == (sorted(projects.values()),), registered
    _report("two tenants", nodes=sorted(ports.values()), jobs=len(ran))
