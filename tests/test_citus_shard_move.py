"""A queue's shards moved to another node while real workers drain it: no job lost, none
accepted twice.

Three ``codity worker`` processes (concurrency 5) drain a queue of 3,000 jobs, each sending
the queue's calls straight to the node that holds it (codity.worker.node_routes). When a
fifth of them is done, ``citus_move_shard_placement`` moves the queue's shard of
``codity.jobs`` — and with it the colocated shards of executions, dead letters, minute
counts, totals and limiter, the queue's whole shard group — to the other worker node in
either of Citus's ways — ``block_writes`` (writes wait for the copy) or ``force_logical``
(copied by logical replication while writes go on, then a short block to catch up) — while
the workers go on claiming and completing. Afterwards, from two sides:

- the handlers' own record (each run writes a line in its worker's file, as in the storm of
  tests/test_citus_workers.py): every job ran exactly once;
- the database: every job completed, exactly one execution per job and it is 'completed'
  (none reaped, none refused by a fence), no job left queued, claimed or running; and 500
  jobs enqueued once the move has returned are claimed and completed on the new node.

No fault of Codity's own can be injected here: the guarantee rests on Citus's write block
during the copy, the delegated bodies following the new placement, and the fence. What the
test catches: a completion lost in the move (a job left running or queued, or the drain
stopping: timeout), a job run or accepted twice (two lines, two executions), a placement
that did not move, and workers that never called the node or did not follow the queue to
its new one (their logs, with a heartbeat every 0.5 s: each asks where the queue lives).
Meanwhile the calls a worker still sends to the old node are passed on by it: a stale
route costs a hop, never a wrong answer.
"""

from __future__ import annotations

import re
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from codity.db.citus import JOB_TABLES
from tests.citus import CitusCluster
from tests.processes import Probe, Processes, wait_until
from tests.sqlapi import create_queue_call, enqueue_many_call

pytestmark = pytest.mark.citus

JOBS = 3000
LATER = 500
WORKERS = 3
STORM_APP = "tests.test_citus_workers:registry"  # its storm.note writes one line per run


def _dbname(url: str) -> str:
    return urlsplit(url).path.lstrip("/")


@pytest.fixture
def probe(citus_db_url: str) -> Iterator[Probe]:
    with Probe(citus_db_url) as p:
        yield p


def _followed(log_path: Path, source: int, target: int) -> bool:
    """Whether a worker's log says it sent the queue's calls to the node at port ``source``
    (codity.worker.node_routes), then that they follow the queue to ``target``."""
    text = log_path.read_text(errors="replace")
    went = re.search(rf"go to the node that holds them, [^\"]*:{source}\b", text)
    moved = re.search(rf"moved from node [^ ]*:{source} to [^ ]*:{target};", text)
    return went is not None and moved is not None and went.start() < moved.start()


def _report(title: str, **figures: Any) -> None:
    print(f"\n[{title}] " + ", ".join(f"{k}={v}" for k, v in figures.items()))


@pytest.mark.parametrize("mode", ["block_writes", "force_logical"])
def test_moving_a_busy_queues_shards_during_a_drain_loses_and_doubles_no_job(
    citus_cluster: CitusCluster, citus_db_url: str, probe: Probe, tmp_path: Path, mode: str
) -> None:
    database = _dbname(citus_db_url)
    [(queue,)] = probe.execute(*create_queue_call("busy"))
    source = citus_cluster.node_port_of(database, "codity.jobs", queue)
    [target] = [w.port for w in citus_cluster.workers if w.port != source]
    colocated = probe.rows(
        "SELECT s.table_name::text, s.nodeport FROM pg_catalog.citus_shards s"
        " WHERE s.shardid IN (SELECT c.shardid FROM pg_catalog.citus_shards c"
        "  WHERE c.colocation_id = (SELECT colocationid FROM pg_catalog.pg_dist_partition"
        "   WHERE logicalrelid = 'codity.jobs'::regclass)"
        "  AND pg_catalog.get_shard_id_for_distribution_column(c.table_name, %s) = c.shardid)"
        " ORDER BY 1",
        [queue],
    )
    assert len(colocated) == len(JOB_TABLES) and {port for _, port in colocated} == {source}, (
        colocated
    )
    for first in range(0, JOBS, 1000):
        probe.execute(
            *enqueue_many_call(
                "busy",
                [{"task": "storm.note", "payload": {"n": n}} for n in range(first, first + 1000)],
            )
        )
    ran_dir = tmp_path / "ran"
    ran_dir.mkdir()
    # Heartbeats every 0.5 s: each one asks again where the queue lives.
    env = {"CODITY_STORM_DIR": str(ran_dir), "WORKER_HEARTBEAT_MS": "500"}
    with Processes(tmp_path, citus_db_url, **env) as procs:
        workers = [
            procs.start(
                f"worker-{n}",
                ["worker", "--app", STORM_APP, "--queue", "busy", "--concurrency", "5"],
            )
            for n in range(WORKERS)
        ]

        def completed() -> int:
            return int(
                probe.value(
                    "SELECT count(*) FROM codity.jobs WHERE queue_id = %s AND status = 'completed'",
                    [queue],
                )
            )

        wait_until(
            lambda: completed() >= JOBS // 5,
            timeout=120,
            interval=0.1,
            what="a fifth of the jobs done",
            alive=workers,
        )
        before_move = completed()
        began = time.monotonic()
        shard = citus_cluster.move_shard(database, "codity.jobs", queue, target, mode=mode)
        move_s = time.monotonic() - began
        after_move = completed()
        # More work after the move, whatever the timing: enqueued, claimed and completed
        # where the queue lives now.
        probe.execute(
            *enqueue_many_call(
                "busy", [{"task": "storm.note", "payload": {"after": n}} for n in range(LATER)]
            )
        )
        wait_until(
            lambda: completed() == JOBS + LATER,
            timeout=180,
            interval=0.2,
            what="every job completed",
            alive=workers,
        )
        # Each worker sent the queue's calls to its node, and follows it to the new one.
        wait_until(
            lambda: all(_followed(w.log_path, source, target) for w in workers),
            timeout=30,
            interval=0.2,
            what="every worker's calls following the queue to its new node",
            alive=workers,
        )
        for worker in workers:
            worker.send(signal.SIGTERM)
        codes = [worker.wait(timeout=60) for worker in workers]
        logs = "\n".join(
            line
            for worker in workers
            for line in worker.log_path.read_text(errors="replace").splitlines()
            if '"level":"warning"' in line or '"level":"error"' in line
        )

    ran: Counter[int] = Counter()
    for path in ran_dir.glob("*.ran"):
        for line in path.read_text().splitlines():
            ran[int(line.split()[0])] += 1
    jobs = {
        int(r[0]) for r in probe.rows("SELECT id FROM codity.jobs WHERE queue_id = %s", [queue])
    }
    executions = probe.rows(
        "SELECT job_id, count(*), count(*) FILTER (WHERE status = 'completed')"
        " FROM codity.job_executions WHERE queue_id = %s GROUP BY job_id",
        [queue],
    )
    not_once = [(job, n, done) for job, n, done in executions if (n, done) != (1, 1)]
    states = dict(
        probe.rows(
            "SELECT status::text, count(*) FROM codity.jobs WHERE queue_id = %s GROUP BY 1",
            [queue],
        )
    )
    moved = probe.rows(
        "SELECT DISTINCT nodeport FROM pg_catalog.citus_shards WHERE shardid = %s", [shard]
    )
    _report(
        f"shard-move/{mode}",
        jobs=JOBS,
        done_before_move=before_move,
        done_during_move=after_move - before_move,
        move_s=round(move_s, 2),
        from_node=source,
        to_node=target,
        most_runs_of_one_job=max(ran.values(), default=0),
        worker_warnings=len(logs.splitlines()),
        exit_codes=codes,
    )
    if logs:
        print(logs[:3000])

    assert moved == [(target,)]
    assert citus_cluster.node_port_of(database, "codity.job_executions", queue) == target
    assert states == {"completed": JOBS + LATER}, states
    assert len(jobs) == JOBS + LATER and len(executions) == JOBS + LATER
    assert not_once == [], f"jobs not completed exactly once: {not_once[:10]}"
    assert probe.value("SELECT count(*) FROM codity.fence_rejections") == 0
    assert sum(ran.values()) == JOBS + LATER and set(ran) == jobs, "a handler ran a job twice"
    assert codes == [0] * WORKERS
