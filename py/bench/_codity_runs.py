"""Codity measured by the method used for PGQueuer: drain, enqueue, pickup latency.

The drain is ``codity bench``'s (codity.bench._throughput) with one difference of
measure: the time runs from the first claim (``job_executions.claimed_at``, the claim
statement's ``now()``) to the last completion (``jobs.finished_at``), both on the
database's clock, as PGQueuer's is taken from its first pick to its last completion.
The jobs wait in a paused queue that is resumed once every worker listens, so every
process starts together. WAL and CPU are read around it (codity.bench._usage). Enqueue and
pickup reuse ``codity bench``'s own functions.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg

from codity.bench._against_model import CODITY, Config, DrainRun, EnqueueRun, PickupRun
from codity.bench._latency import pickup
from codity.bench._model import BenchOptions
from codity.bench._throughput import enqueue_batched, enqueue_one_by_one, queue_id, reset_jobs
from codity.bench._usage import postmaster_pid, read_usage, spent_since
from codity.bench._workers import BenchError, WorkerProcesses

__all__ = ["DEFAULT_CAPACITY", "codity_drain", "codity_enqueue", "codity_pickup"]

Conn = psycopg.Connection[Any]
DEFAULT_CAPACITY = 5
"""``codity worker``'s default concurrency (WORKER_CAPACITY unset)."""
DRAIN_QUEUE = "bench"
ENQUEUE_QUEUE = "enqueue"
_UNFINISHED = """
SELECT count(*) FROM codity.jobs j
WHERE j.queue_id = %s AND j.status IN ('queued', 'claimed', 'running')
"""
_OUTCOME = """
SELECT count(*) FILTER (WHERE j.status = 'completed'),
       (SELECT count(*) FROM codity.job_executions x WHERE x.queue_id = %(queue)s),
       EXTRACT(epoch FROM pg_catalog.max(j.finished_at)
                        - (SELECT pg_catalog.min(x.claimed_at) FROM codity.job_executions x
                           WHERE x.queue_id = %(queue)s))
FROM codity.jobs j
WHERE j.queue_id = %(queue)s
"""


def codity_enqueue(conn: Conn, jobs: int, batch: int) -> EnqueueRun:
    """``codity.enqueue`` one by one, or ``codity.enqueue_many`` with ``batch`` per call."""
    queue_id(conn, ENQUEUE_QUEUE)
    if batch == 1:
        found = enqueue_one_by_one(conn, ENQUEUE_QUEUE, jobs)
    else:
        found = enqueue_batched(conn, ENQUEUE_QUEUE, jobs, batch)
    return EnqueueRun(CODITY, jobs, batch, found.seconds)


def _load(conn: Conn, jobs: int) -> int:
    reset_jobs(conn)
    qid = queue_id(conn, DRAIN_QUEUE)
    conn.execute("SELECT codity.pause_queue(%s)", [DRAIN_QUEUE])
    enqueue_batched(conn, DRAIN_QUEUE, jobs, 1_000)
    conn.execute("VACUUM ANALYZE codity.jobs, codity.job_executions")
    return qid


def _wait(conn: Conn, workers: WorkerProcesses, qid: int, jobs: int) -> None:
    deadline = time.monotonic() + 120 + jobs / 50
    while (left := int(conn.execute(_UNFINISHED, [qid]).fetchall()[0][0])) > 0:
        if time.monotonic() > deadline:
            raise BenchError(f"Codity drain: {left} job(s) unfinished\n{workers.log_tail()}")
        workers.check_alive()
        time.sleep(0.1)


def codity_drain(dsn: str, conn: Conn, config: Config, jobs: int, log_dir: Path) -> DrainRun:
    """N ``bench.noop`` jobs through ``config.processes`` real ``codity worker`` processes."""
    qid = _load(conn, jobs)
    postmaster = postmaster_pid(conn)
    with WorkerProcesses(
        dsn,
        app="codity.worker.demo:registry",
        queue=DRAIN_QUEUE,
        concurrency=config.batch,
        count=config.processes,
        listen=True,
        log_dir=log_dir,
        label="against",
    ) as workers:
        workers.wait_ready(conn)
        time.sleep(0.5)  # let each worker's first (empty) claim pass: they are idle now
        before = read_usage(conn, postmaster)
        conn.execute("SELECT codity.resume_queue(%s)", [DRAIN_QUEUE])
        _wait(conn, workers, qid, jobs)
        spent = spent_since(conn, before, postmaster)
        codes = workers.stop()
    if any(codes):
        raise BenchError(f"Codity drain: worker exit codes {codes}\n{workers.log_tail()}")
    row = conn.execute(_OUTCOME, {"queue": qid}).fetchall()[0]
    completed, executions, seconds = int(row[0]), int(row[1]), float(row[2])
    if completed != jobs or executions != jobs:
        raise BenchError(f"Codity drain of {jobs}: {completed} completed with {executions} "
                         "executions; every job should have run exactly once")  # fmt: skip
    return DrainRun(jobs, seconds, spent.wal_bytes, spent.server_cpu_s, spent.workers_cpu_s,
                    wal_window=spent.wal_window, statements=spent.statements)  # fmt: skip


def codity_pickup(dsn: str, conn: Conn, samples: int, log_dir: Path) -> PickupRun:
    """``codity bench``'s pickup with NOTIFY, the worker at its default capacity."""
    options = replace(BenchOptions(), concurrency=DEFAULT_CAPACITY, pickup_samples=samples)
    found = pickup(dsn, conn, options, listen=True, log_dir=log_dir)
    return PickupRun(
        CODITY,
        total_ms=tuple(s + c for s, c in zip(found.samples_ms, found.commit_ms, strict=True)),
        after_commit_ms=found.samples_ms,
    )
