"""One drain of N jobs over 8 queues by real ``codity worker`` processes, on one side.

The same on the plain server and on the cluster's coordinator, which is all a worker
process knows of the cluster:

1. The jobs table is emptied and N ``bench.pickup`` jobs (codity.bench.tasks: the handler
   returns the time it began, so every completion stores a small result) are enqueued, N/8
   per queue, in ``codity.enqueue_many`` calls of 1,000, into paused queues; then ``VACUUM
   ANALYZE``.
2. W worker processes start (``codity worker --app codity.bench.tasks:registry``, every
   queue given to every process, in the same order, at concurrency C): the way a pool of
   workers serving a set of queues is deployed. Splitting the queues between processes
   would make the figure depend on how the queues' hashes happen to fall on the nodes;
   every process on every queue keeps both processes busy to the end on either side.
3. Once each is registered and its listener connected, and its first (empty) claim has
   passed, every server's counters are read (codity.bench.citus_stats) and the queues are
   resumed, in one statement; each resume's NOTIFY wakes the workers.
4. The bench polls each unfinished queue's count (a statement on that queue's shard only)
   until none is left, reads the counters again, then stops the workers (SIGTERM; each
   must exit 0).
5. Every job must be completed with exactly one execution, or the run fails. The time runs
   from the first claim (``job_executions.claimed_at``) to the last completion
   (``finished_at``), both on the database's clock.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import psycopg

from codity.bench._throughput import queue_id, reset_jobs
from codity.bench._workers import BenchError, WorkerProcesses
from codity.bench.citus_model import CITUS, CitusOptions, DrainRound, NodeSpent, Placement
from codity.bench.citus_servers import Node
from codity.bench.citus_stats import TAG, before_drain, citus_statements, spent
from codity.bench.tasks import PICKUP_TASK
from codity.supervisor import codity_command

__all__ = ["APP", "MISSING_TASK", "QueuesWorkers", "drain", "placements", "queue_names"]

log = logging.getLogger(__name__)

Conn = psycopg.Connection[Any]
APP = "codity.bench.tasks:registry"
MISSING_TASK = "bench.no-handler"
"""A task the app has no handler for: the worker fails it (UnknownTask)."""
BATCH = 1_000
_UNFINISHED = f"""
SELECT count(*) AS {TAG}_unfinished FROM codity.jobs j
WHERE j.queue_id = %s AND j.status IN ('queued', 'claimed', 'running')
"""
# One statement, so one transaction for the eight queue rows: on the cluster a write to a
# reference table is a two-phase commit over every node, the bench's own, not the drain's.
_RESUME = f"SELECT /* {TAG} */ count(codity.resume_queue(q)) FROM unnest(%s::text[]) AS q"
_JOBS = """
SELECT count(*) FILTER (WHERE j.status = 'completed'),
       count(*) FILTER (WHERE j.status = 'dead_letter'), count(*)
FROM codity.jobs j WHERE j.queue_id = ANY (%(ids)s)
"""
_EXECUTIONS = """
SELECT count(*), count(DISTINCT x.job_id),
       count(DISTINCT (x.worker_id, x.queue_id, x.claimed_at)),
       EXTRACT(epoch FROM pg_catalog.max(x.finished_at) - pg_catalog.min(x.claimed_at))
FROM codity.job_executions x WHERE x.queue_id = ANY (%(ids)s)
"""
_PLACEMENT = """
SELECT n.nodeport
FROM pg_catalog.pg_dist_placement p JOIN pg_catalog.pg_dist_node n USING (groupid)
WHERE p.shardid = pg_catalog.get_shard_id_for_distribution_column('codity.jobs', %s)
"""


def queue_names(count: int) -> list[str]:
    return [f"drain-{n + 1}" for n in range(count)]


class QueuesWorkers(WorkerProcesses):
    """Worker processes like codity.bench._workers', each serving every queue given."""

    def __init__(
        self,
        url: str,
        *,
        queues: list[str],
        concurrency: int,
        count: int,
        log_dir: Path,
        label: str,
        env: dict[str, str] | None = None,
    ) -> None:
        super().__init__(url, app=APP, queue=queues[0], concurrency=concurrency, count=count,
                         listen=True, log_dir=log_dir, label=label, env=env)  # fmt: skip
        every = [arg for queue in queues for arg in ("--queue", queue)]
        self._command = [*codity_command(), "worker", "--app", APP, *every,
                         "--concurrency", str(concurrency)]  # fmt: skip


def _load(conn: Conn, queues: list[str], per_queue: int, failing: int) -> dict[str, int]:
    reset_jobs(conn)
    ids = {}
    spec = json.dumps([{"task": PICKUP_TASK}] * BATCH)
    doomed = json.dumps([{"task": MISSING_TASK, "max_attempts": 1}])
    for n, queue in enumerate(queues):
        ids[queue] = queue_id(conn, queue)
        conn.execute("SELECT codity.pause_queue(%s)", [queue])
        for _ in range(failing // len(queues) + (n < failing % len(queues))):
            conn.execute("SELECT job_id FROM codity.enqueue_many(%s, %s::jsonb)", [queue, doomed])
        for done in range(0, per_queue, BATCH):
            size = min(BATCH, per_queue - done)
            batch = spec if size == BATCH else json.dumps([{"task": PICKUP_TASK}] * size)
            query = "SELECT job_id FROM codity.enqueue_many(%s, %s::jsonb)"
            if len(conn.execute(query, [queue, batch]).fetchall()) != size:
                raise BenchError(f"enqueue_many into {queue} did not return {size} jobs")
    conn.execute("VACUUM ANALYZE codity.jobs, codity.job_executions")
    return ids


def _wait(conn: Conn, workers: WorkerProcesses, ids: dict[str, int], jobs: int) -> None:
    deadline = time.monotonic() + 120 + jobs / 50
    left = dict(ids)
    while left:
        # The workers take their queues in order: look at the first queue not done yet, and
        # at the next ones only once it is, so the bench adds one statement per poll.
        for queue, qid in list(left.items()):
            if int(conn.execute(_UNFINISHED, [qid]).fetchall()[0][0]) > 0:
                break
            del left[queue]
        if not left:
            return
        if time.monotonic() > deadline:
            raise BenchError(f"drain: {', '.join(left)} unfinished\n{workers.log_tail()}")
        workers.check_alive()
        time.sleep(0.1)


def drain(
    side: str,
    round_: int,
    nodes: list[Node],
    conns: dict[str, Conn],
    options: CitusOptions,
    *,
    log_dir: Path,
    per_queue: int | None = None,
    failing: int = 0,
    env: dict[str, str] | None = None,
) -> DrainRound:
    """One drain; ``nodes[0]`` is where clients connect (plain server or coordinator).

    ``failing`` more jobs of a task no handler serves, one attempt each, spread over the
    queues: the worker fails each (``fail_in_queue``) and it becomes a dead letter. ``env``
    is added to the workers' environment (the coverage drain's short heartbeat)."""
    entry = nodes[0]
    conn = conns[entry.name]
    citus = side == CITUS
    queues = queue_names(options.queues)
    per_queue = options.per_queue if per_queue is None else per_queue
    jobs = per_queue * len(queues)
    ids = _load(conn, queues, per_queue, failing)
    with QueuesWorkers(entry.url(), queues=queues, concurrency=options.concurrency,
                       count=options.workers, log_dir=log_dir, label=f"{side}{round_}",
                       env=env) as procs:  # fmt: skip
        procs.wait_ready(conn)
        time.sleep(0.5)  # each worker's first (empty) claim has passed: they are idle
        before = [before_drain(n, conns[n.name], citus=citus) for n in nodes]
        conn.execute(_RESUME, [queues])
        _wait(conn, procs, ids, jobs + failing)
        found = [spent(b, conns[b.node.name]) for b in before]
        keyed, unkeyed = citus_statements(conn) if citus else (0, ())
        codes = procs.stop()
    if any(codes):
        raise BenchError(f"{side} drain: worker exit codes {codes}\n{procs.log_tail()}")
    spent_nodes: tuple[NodeSpent, ...] = tuple(n for n, _ in found)
    completed, dead, rows = conn.execute(_JOBS, {"ids": list(ids.values())}).fetchall()[0]
    executions, distinct, claims, seconds = conn.execute(
        _EXECUTIONS, {"ids": list(ids.values())}
    ).fetchall()[0]
    if not (completed == jobs and dead == failing
            and rows == executions == distinct == jobs + failing):  # fmt: skip
        raise BenchError(
            f"{side} drain of {jobs} jobs and {failing} failing: {completed} completed and "
            f"{dead} dead of {rows}, {executions} executions of {distinct} jobs; every job "
            "should have run exactly once"
        )
    return DrainRound(
        side=side, round=round_, jobs=jobs, seconds=float(seconds), nodes=spent_nodes,
        workers_cpu_s=found[0][1], claims=int(claims), failing=failing,
        heartbeat_ms=int(env["WORKER_HEARTBEAT_MS"]) if env else None, router_or_delegated=keyed,
        unkeyed=unkeyed,
    )  # fmt: skip


def placements(conn: Conn, nodes: list[Node], queues: list[str]) -> tuple[Placement, ...]:
    """Which worker node holds each queue's shard group."""
    by_port = {n.port: n.name for n in nodes}
    found = []
    for queue in queues:
        qid = queue_id(conn, queue)
        row = conn.execute(_PLACEMENT, [qid]).fetchone()
        assert row is not None
        found.append(Placement(queue, qid, by_port.get(int(row[0]), f"port {row[0]}")))
    return tuple(found)
