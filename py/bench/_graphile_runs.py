"""Graphile Worker measured by the method used for Codity and PGQueuer.

The drain follows Graphile Worker's own perfTest (perfTest/run.js in its repository): N jobs
added up front (``addJobs``, 1,000 per call), then worker processes run with ``--once``
semantics (``runOnce``: run every job, return when none is left), here held at a start line
so that they begin together. Graphile Worker deletes a job as it completes it, so no row
keeps a timestamp: the time runs from the first handler's start in any process to the last
process's ``runOnce`` returning (every completion batch committed), both read from the
machine's clock by the workers. A job runs exactly once when its table is empty at the
end (every job deleted, so each completed at least once) and the handlers together ran N
jobs and saw N distinct payload ids.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg

from codity.bench._against_model import GRAPHILE, Config, DrainRun, EnqueueRun, PickupRun
from codity.bench._node_env import NodeEnv
from codity.bench._node_runs import NodeWorkers, pickup_run
from codity.bench._usage import postmaster_pid, read_usage, spent_since
from codity.bench._workers import BenchError

__all__ = [
    "GRAPHILE_DOCUMENTED",
    "graphile_drain",
    "graphile_enqueue",
    "graphile_pickup",
    "graphile_reset",
]

Conn = psycopg.Connection[Any]
GRAPHILE_DOCUMENTED = (24, 500)
"""concurrentJobs and localQueue.size of its docs' performance page (with
completeJobBatchDelay and failJobBatchDelay 0): its published figures' configuration."""
_JOBS = "SELECT count(*) FROM graphile_worker._private_jobs"


def graphile_reset(conn: Conn) -> None:
    """Empty its jobs (its scratch database only)."""
    conn.execute("TRUNCATE graphile_worker._private_jobs CASCADE")


def graphile_enqueue(env: NodeEnv, dsn: str, jobs: int, batch: int) -> EnqueueRun:
    """``addJob`` one by one, or ``addJobs`` with ``batch`` per call, from its WorkerUtils."""
    found = env.client(dsn, "enqueue", "--jobs", str(jobs), "--batch", str(batch))
    return EnqueueRun(GRAPHILE, jobs, batch, float(found["seconds"]))


def _arguments(config: Config) -> list[str]:
    if config.limit is None:  # its defaults: no local queue, one completion per job
        return ["--concurrency", str(config.batch)]
    return ["--concurrency", str(config.batch), "--local-queue", str(config.limit),
            "--batch-delay", "0"]  # fmt: skip


def graphile_drain(env: NodeEnv, dsn: str, conn: Conn, config: Config, jobs: int) -> DrainRun:
    """N no-op jobs, then ``config.processes`` runOnce processes until none is left."""
    graphile_reset(conn)
    graphile_enqueue(env, dsn, jobs, 1_000)
    conn.execute("VACUUM ANALYZE graphile_worker._private_jobs")
    postmaster = postmaster_pid(conn)
    command = ["drain", *_arguments(config)]
    with NodeWorkers(env, dsn, config.processes, "drain", *command) as workers:
        workers.wait_ready()
        before = read_usage(conn, postmaster)
        workers.go()
        workers.wait_results(timeout=120 + jobs / 50)
        spent = spent_since(conn, before, postmaster)
        tallies = workers.tallies()
        codes = workers.stop()
    if any(codes):
        raise BenchError(f"Graphile Worker drain: exit codes {codes}\n{workers.log_tail()}")
    left = int(conn.execute(_JOBS).fetchall()[0][0])
    ran, distinct = sum(t.ran for t in tallies), sum(t.distinct for t in tallies)
    if left or ran != jobs or distinct != jobs:
        raise BenchError(f"Graphile Worker drain of {jobs}: {left} left, {ran} runs of "
                         f"{distinct} ids; every job should have run exactly once")  # fmt: skip
    first = min(t.first for t in tallies if t.first is not None)
    finished = max(t.finished for t in tallies if t.finished is not None)
    return DrainRun(jobs, finished - first, spent.wal_bytes, spent.server_cpu_s,
                    spent.workers_cpu_s, wal_window=spent.wal_window,
                    statements=spent.statements)  # fmt: skip


def graphile_pickup(env: NodeEnv, dsn: str, conn: Conn, samples: int) -> PickupRun:
    """One idle worker at its defaults (``run``: concurrency 1, LISTEN on new jobs); the
    producer adds one job at a time, 10 to 50 ms apart."""
    graphile_reset(conn)
    starts = env.prefix / "pickup-starts.txt"
    starts.unlink(missing_ok=True)
    with NodeWorkers(env, dsn, 1, "pickup", "work", BENCH_STARTS=str(starts)) as worker:
        worker.wait_ready()
        worker.go()
        time.sleep(1.0)  # its first fetch found nothing: it is idle, listening
        found = env.client(dsn, "pickup", "--samples", str(samples))["samples"]
        sent = {int(i): (s, a) for i, s, a in found}
        run = pickup_run(GRAPHILE, sent, worker, starts)
        codes = worker.stop()
    if any(codes):
        raise BenchError(f"Graphile Worker pickup: exit code {codes}\n{worker.log_tail()}")
    return run
