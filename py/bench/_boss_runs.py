"""pg-boss measured by the method used for Codity and PGQueuer.

pg-boss keeps a finished job in its table (``pgboss.job``, state ``completed``, archived
hours later), with ``started_on`` set by the fetch and ``completed_on`` by the completion,
both the statements' ``now()``. So its drain is timed as Codity's is, on the database's
clock, from the first fetch to the last completion, and checked in its own table: every
job completed, none retried, and its handlers together ran N jobs with N distinct ids.

A pg-boss worker is a loop per ``work()`` call that fetches up to ``batchSize`` jobs, runs
them, and then waits out the rest of its polling interval whether or not it found any (its
docs: "The default options for work() is 1 job every 2 seconds"). Its fastest shape is
therefore large batches, several loops and the shortest interval it accepts (0.5 s). At
its defaults two processes finish one job a second, so its defaults drain is
``PGBOSS_DEFAULTS_JOBS`` jobs, not N; and its pickup producer waits for each job to start
before sending the next, after a random part of the polling interval, or a 2-second poller
would meet a backlog rather than one job, or sends locked to its polls.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg

from codity.bench._against_model import (
    PGBOSS,
    PGBOSS_DEFAULT_POLL_S,
    PGBOSS_TUNED_POLL_S,
    Config,
    DrainRun,
    EnqueueRun,
    PickupRun,
)
from codity.bench._node_env import NodeEnv
from codity.bench._node_runs import NodeWorkers, pickup_run
from codity.bench._usage import postmaster_pid, read_usage, spent_since
from codity.bench._workers import BenchError

__all__ = [
    "PGBOSS_DEFAULTS_JOBS",
    "PGBOSS_PICKUP_SAMPLES",
    "boss_drain",
    "boss_enqueue",
    "boss_pickup",
    "boss_reset",
]

Conn = psycopg.Connection[Any]
PGBOSS_DEFAULTS_JOBS = 10
"""Its defaults drain: about ten seconds at one job per 2 s per process, two processes."""
PGBOSS_PICKUP_SAMPLES = 30
"""At most: each takes about one polling interval (2 s), half waiting, half spread."""
NOOP = "bench_noop"
PICKUP = "bench_pickup"
_DONE = "SELECT count(*) FROM pgboss.job j WHERE j.name = %s AND j.state = 'completed'"
_OUTCOME = """
SELECT count(*), count(*) FILTER (WHERE j.state = 'completed'),
       count(*) FILTER (WHERE j.retry_count > 0),
       EXTRACT(epoch FROM pg_catalog.max(j.completed_on) - pg_catalog.min(j.started_on))
FROM pgboss.job j
WHERE j.name = %s
"""


def boss_reset(conn: Conn) -> None:
    """Empty its jobs, queues kept (its scratch database only)."""
    conn.execute("TRUNCATE pgboss.job, pgboss.archive")


def boss_enqueue(env: NodeEnv, dsn: str, jobs: int, batch: int) -> EnqueueRun:
    """``send`` one by one, or ``insert`` with ``batch`` jobs per call."""
    found = env.client(dsn, "enqueue", "--jobs", str(jobs), "--batch", str(batch))
    return EnqueueRun(PGBOSS, jobs, batch, float(found["seconds"]))


def _wait(conn: Conn, workers: NodeWorkers, jobs: int, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while int(conn.execute(_DONE, [NOOP]).fetchall()[0][0]) < jobs:
        if time.monotonic() > deadline:
            raise BenchError(f"pg-boss drain: jobs left unfinished\n{workers.log_tail()}")
        workers.check_alive()
        time.sleep(0.02)


def boss_drain(env: NodeEnv, dsn: str, conn: Conn, config: Config, jobs: int) -> DrainRun:
    """N no-op jobs (``PGBOSS_DEFAULTS_JOBS`` at its defaults), then ``config.processes``
    worker processes until every one is completed."""
    if config.default:
        jobs = min(jobs, PGBOSS_DEFAULTS_JOBS)
    boss_reset(conn)
    boss_enqueue(env, dsn, jobs, 1_000)
    conn.execute("VACUUM ANALYZE pgboss.job")
    postmaster = postmaster_pid(conn)
    poll = PGBOSS_DEFAULT_POLL_S if config.default else PGBOSS_TUNED_POLL_S
    command = ["work", "--batch", str(config.batch), "--workers", str(config.limit or 1),
               "--poll", f"{poll:g}"]  # fmt: skip
    with NodeWorkers(env, dsn, config.processes, "drain", *command) as workers:
        workers.wait_ready()
        before = read_usage(conn, postmaster)
        workers.go()
        _wait(conn, workers, jobs, 120 + jobs / 50 + (jobs * poll if config.default else 0))
        spent = spent_since(conn, before, postmaster)
        codes = workers.stop()
    if any(codes):
        raise BenchError(f"pg-boss drain: exit codes {codes}\n{workers.log_tail()}")
    tallies = workers.tallies()
    row = conn.execute(_OUTCOME, [NOOP]).fetchall()[0]
    total, completed, retried, seconds = int(row[0]), int(row[1]), int(row[2]), float(row[3])
    ran, distinct = sum(t.ran for t in tallies), sum(t.distinct for t in tallies)
    if total != jobs or completed != jobs or retried or ran != jobs or distinct != jobs:
        raise BenchError(f"pg-boss drain of {jobs}: {completed} of {total} completed, "
                         f"{retried} retried, {ran} runs of {distinct} ids; every job should "
                         "have run exactly once")  # fmt: skip
    return DrainRun(jobs, seconds, spent.wal_bytes, spent.server_cpu_s, spent.workers_cpu_s,
                    wal_window=spent.wal_window, statements=spent.statements)  # fmt: skip


def boss_pickup(env: NodeEnv, dsn: str, conn: Conn, samples: int) -> PickupRun:
    """One idle worker at its defaults (one job per fetch, a fetch every 2 s); the producer
    sends one job, waits for it to start, then 10 ms and a random part of 2 s, so that a
    job arrives at any point of the worker's polling interval."""
    boss_reset(conn)
    starts = env.prefix / "pickup-starts.txt"
    starts.unlink(missing_ok=True)
    samples = min(samples, PGBOSS_PICKUP_SAMPLES)
    with NodeWorkers(env, dsn, 1, "pickup", "work", "--queue", PICKUP,
                     BENCH_STARTS=str(starts)) as worker:  # fmt: skip
        worker.wait_ready()
        worker.go()
        time.sleep(1.0)  # its first fetch found nothing: it is idle, polling
        spread = str(int(PGBOSS_DEFAULT_POLL_S * 1000))
        found = env.client(dsn, "pickup", "--samples", str(samples), "--starts", str(starts),
                           "--spread", spread)  # fmt: skip
        sent = {int(i): (s, a) for i, s, a in found["samples"]}
        run = pickup_run(PGBOSS, sent, worker, starts)
        codes = worker.stop()
    if any(codes):
        raise BenchError(f"pg-boss pickup: exit code {codes}\n{worker.log_tail()}")
    return run
