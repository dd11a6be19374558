"""Throughput: enqueue (one by one, batched), drain by real workers, and the raw-SQL ceiling.

The drain and the ceiling start from the same state: an emptied jobs table holding N fresh
``bench.noop`` jobs in queue ``bench``, analyzed. The workers drain a paused queue that is
resumed once every worker is registered and listening; the time runs from the resume's
transaction to the last completion, both read from the database's clock. The ceiling is
``pgbench`` (from the server's own bin folder) running the worker's loop — its own
claim-and-start statement, then ``codity.complete_many``, two transactions as in the
worker — with no handler and no Python, at the workers' claim size.
"""

from __future__ import annotations

import json
import logging
import math
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import psycopg

from codity.bench._model import BenchOptions, Drain, Enqueue
from codity.bench._worker_loop import loop_workers, worker_loop_command, worker_loop_script
from codity.bench._workers import BenchError, WorkerProcesses

# A worker process keeps two statements in flight, its claim loop's and its completer's;
# pgbench runs one loop per client, so it gets two clients per worker process.
CLIENTS_PER_WORKER = 2

__all__ = [
    "CLIENTS_PER_WORKER",
    "ceiling",
    "drain",
    "enqueue_batched",
    "enqueue_one_by_one",
    "reset_jobs",
]

log = logging.getLogger(__name__)

Conn = psycopg.Connection[Any]
NOOP = "bench.noop"
DRAIN_QUEUE = "bench"
_OUTCOME = """
SELECT count(*) FILTER (WHERE j.status = 'completed'),
       (SELECT count(*) FROM codity.job_executions x WHERE x.queue_id = %(queue)s),
       (SELECT count(DISTINCT (x.worker_id, x.claimed_at))
        FROM codity.job_executions x WHERE x.queue_id = %(queue)s),
       (SELECT count(DISTINCT (x.worker_id, x.finished_at))
        FROM codity.job_executions x WHERE x.queue_id = %(queue)s AND x.status = 'completed'),
       pg_catalog.max(j.finished_at)
FROM codity.jobs j
WHERE j.queue_id = %(queue)s
"""
_UNFINISHED = """
SELECT count(*) FROM codity.jobs j
WHERE j.queue_id = %s AND j.status IN ('queued', 'claimed', 'running')
"""


def queue_id(conn: Conn, name: str) -> int:
    row = conn.execute("SELECT queue_id FROM codity.create_queue(%s)", [name]).fetchone()
    assert row is not None
    return int(row[0])


def reset_jobs(conn: Conn) -> None:
    """Empty the jobs table and what hangs off it (the scratch database only)."""
    conn.execute("TRUNCATE codity.jobs, codity.job_executions, codity.fence_rejections CASCADE")


def enqueue_one_by_one(conn: Conn, queue: str, jobs: int) -> Enqueue:
    """``codity.enqueue`` per job on one autocommit connection: a round trip and a commit each."""
    query = "SELECT job_id FROM codity.enqueue(%s, %s)"
    start = time.perf_counter()
    for _ in range(jobs):
        conn.execute(query, [queue, NOOP], prepare=True).fetchall()
    return Enqueue(jobs, 1, time.perf_counter() - start)


def enqueue_batched(conn: Conn, queue: str, jobs: int, batch: int) -> Enqueue:
    """``codity.enqueue_many`` with ``batch`` jobs per call, each call its own transaction."""
    query = "SELECT job_id FROM codity.enqueue_many(%s, %s::jsonb)"
    full = json.dumps([{"task": NOOP}] * batch)
    start = time.perf_counter()
    for done in range(0, jobs, batch):
        size = min(batch, jobs - done)
        spec = full if size == batch else json.dumps([{"task": NOOP}] * size)
        rows = conn.execute(query, [queue, spec], prepare=True).fetchall()
        if len(rows) != size:
            raise BenchError(f"enqueue_many returned {len(rows)} rows for {size} jobs")
    return Enqueue(jobs, batch, time.perf_counter() - start)


def _load(conn: Conn, jobs: int, *, paused: bool) -> int:
    reset_jobs(conn)
    qid = queue_id(conn, DRAIN_QUEUE)
    if paused:
        conn.execute("SELECT codity.pause_queue(%s)", [DRAIN_QUEUE])
    enqueue_batched(conn, DRAIN_QUEUE, jobs, 1_000)
    conn.execute("VACUUM ANALYZE codity.jobs, codity.job_executions")
    return qid


def _outcome(conn: Conn, qid: int, jobs: int) -> tuple[int, int, int, int, Any]:
    """Completed jobs, executions, claims, completion batches, last finish; checked."""
    row = conn.execute(_OUTCOME, {"queue": qid}).fetchone()
    assert row is not None
    completed, executions = int(row[0]), int(row[1])
    if completed != jobs or executions != jobs:
        raise BenchError(
            f"{jobs} jobs: {completed} completed with {executions} executions; "
            "every job should have run exactly once"
        )
    return completed, executions, int(row[2]), int(row[3]), row[4]


def drain(url: str, conn: Conn, options: BenchOptions, log_dir: Path) -> Drain:
    """N no-op jobs through W real worker processes of concurrency C."""
    jobs = options.jobs
    qid = _load(conn, jobs, paused=True)
    with WorkerProcesses(
        url,
        app="codity.worker.demo:registry",
        queue=DRAIN_QUEUE,
        concurrency=options.concurrency,
        count=options.workers,
        listen=True,
        log_dir=log_dir,
        label="drain",
    ) as workers:
        workers.wait_ready(conn)
        time.sleep(0.5)  # let each worker's first (empty) claim pass: they are idle now
        row = conn.execute("SELECT codity.resume_queue(%s), pg_catalog.now()", [DRAIN_QUEUE])
        started = row.fetchall()[0][1]
        deadline = time.monotonic() + 120 + jobs / 50
        while True:
            left = conn.execute(_UNFINISHED, [qid]).fetchall()[0][0]
            if left == 0:
                break
            if time.monotonic() > deadline:
                raise BenchError(f"drain: {left} job(s) still unfinished\n{workers.log_tail()}")
            workers.check_alive()
            time.sleep(0.2)
        codes = workers.stop()
    if any(codes):
        raise BenchError(f"drain: worker exit codes {codes}\n{workers.log_tail()}")
    completed, executions, claims, completions, finished = _outcome(conn, qid, jobs)
    seconds = (finished - started).total_seconds()
    return Drain(jobs, seconds, completed, executions, claims, completions, codes)


def ceiling(
    conn: Conn, url: str, options: BenchOptions, pgbench: Path, work: Path, clients: int
) -> Drain:
    """The worker's loop from pgbench, no handler and no Python, at the workers' claim size."""
    jobs, batch = options.jobs, options.concurrency
    qid = _load(conn, jobs, paused=False)
    wbase, _ = loop_workers(conn, DRAIN_QUEUE, clients, "bench-pgbench")
    script = work / "claim_start_complete.sql"
    script.write_text(worker_loop_script())
    per_client = math.ceil(jobs / (clients * batch))
    cmd = worker_loop_command(pgbench, script, url, clients=clients, transactions=per_client,
                              wbase=wbase, queue_id=qid, batch=batch)  # fmt: skip
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    if run.returncode != 0:
        raise BenchError(f"pgbench failed ({run.returncode}):\n{run.stdout}\n{run.stderr}")
    tps = re.search(r"^tps = ([\d.]+) \(without initial connection time\)", run.stdout, re.M)
    done = re.search(r"^number of transactions actually processed: (\d+)", run.stdout, re.M)
    if not tps or not done:
        raise BenchError(f"could not read pgbench's output:\n{run.stdout}")
    transactions = int(done[1])
    completed, executions, claims, completions, _ = _outcome(conn, qid, jobs)
    seconds = transactions / float(tps[1])
    return Drain(jobs, seconds, completed, executions, claims, completions)
