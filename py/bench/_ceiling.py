"""The machine's ceiling beside the drains: the same work with no worker, no Python, no audit.

Three drains of the same N jobs, each by ``pgbench`` (C, prepared statements, the same
number of clients as the drains' processes, 100 jobs per claim), so that the report can say
how close the engine runs to what this server can do at all:

    codity functions   the worker's own two statements, verbatim: codity.claim with
                       p_start (claim.py), then codity.complete_many with its relaxed
                       commit (reporter.py); the engine without the worker
    UPDATE … SKIP LOCKED   a minimal queue: one table, a partial index on the queued rows;
                       claim marks a batch taken (durable), completion deletes it (commit
                       not waited for, as Codity's) — no fence, no audit row, no lease
    DELETE … RETURNING     the least a queue can write: a batch leaves the table as it is
                       taken (at most once: a crash loses it)

WAL and server CPU are read around each, as for the drains (codity.bench._usage).
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

from codity.bench._against_model import DrainRun
from codity.bench._throughput import enqueue_batched, queue_id, reset_jobs
from codity.bench._usage import postmaster_pid, read_usage, spent_since
from codity.bench._worker_loop import (
    loop_workers,
    pgbench_path,
    worker_loop_command,
    worker_loop_script,
)
from codity.bench._workers import BenchError

__all__ = ["CEILINGS", "CLIENTS", "ceiling_drain"]

Conn = psycopg.Connection[Any]
BATCH = 100
CLIENTS = 2
"""pgbench connections: as many as the drains' worker processes compared with."""
QUEUE = "ceiling"
CODITY_FUNCTIONS = "codity functions (pgbench)"
UPDATE_QUEUE = "UPDATE … SKIP LOCKED (pgbench)"
DELETE_QUEUE = "DELETE … RETURNING (pgbench)"
CEILINGS = (CODITY_FUNCTIONS, UPDATE_QUEUE, DELETE_QUEUE)

_MINIMAL_TABLE = """
DROP SCHEMA IF EXISTS ceiling CASCADE;
CREATE SCHEMA ceiling;
CREATE TABLE ceiling.jobs (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    taken boolean NOT NULL DEFAULT false,
    task text NOT NULL,
    payload jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX jobs_queued_idx ON ceiling.jobs (id) WHERE NOT taken;
"""
_UPDATE_SCRIPT = f"""
WITH taken AS (UPDATE ceiling.jobs j SET taken = true
               WHERE j.id IN (SELECT q.id FROM ceiling.jobs q WHERE NOT q.taken ORDER BY q.id
                              LIMIT {BATCH} FOR UPDATE SKIP LOCKED)
               RETURNING j.id, j.task, j.payload)
SELECT coalesce(array_agg(t.id), '{{}}') AS ids FROM taken t \\gset
WITH done AS (DELETE FROM ceiling.jobs j WHERE j.id = ANY (:ids::bigint[]) RETURNING j.id)
SELECT count(*), pg_catalog.set_config('synchronous_commit', 'off', true) FROM done;
"""
_DELETE_SCRIPT = f"""
DELETE FROM ceiling.jobs j
WHERE j.id IN (SELECT q.id FROM ceiling.jobs q ORDER BY q.id LIMIT {BATCH} FOR UPDATE SKIP LOCKED)
RETURNING j.id, j.task, j.payload;
"""


def _load_codity(conn: Conn, jobs: int, clients: int) -> tuple[int, int]:
    """The jobs, queued and analyzed, and one worker per client; returns pgbench's wbase
    and the queue's id."""
    reset_jobs(conn)
    queue_id(conn, QUEUE)
    enqueue_batched(conn, QUEUE, jobs, 1_000)
    wbase, qid = loop_workers(conn, QUEUE, clients, "ceiling")
    conn.execute("VACUUM ANALYZE codity.jobs, codity.job_executions")
    return wbase, qid


def _codity_left(conn: Conn) -> int:
    row = conn.execute(
        "SELECT count(*) FROM codity.jobs j JOIN codity.queues q ON q.id = j.queue_id"
        " WHERE q.name = %s AND j.status <> 'completed'",
        [QUEUE],
    ).fetchall()
    return int(row[0][0])


def _load_minimal(conn: Conn, jobs: int) -> None:
    conn.execute(_MINIMAL_TABLE)
    conn.execute(
        "INSERT INTO ceiling.jobs (task, payload)"
        " SELECT 'bench.noop', '{}' FROM generate_series(1, %s)",
        [jobs],
    )
    conn.execute("VACUUM ANALYZE ceiling.jobs")


def _minimal_left(conn: Conn) -> int:
    return int(conn.execute("SELECT count(*) FROM ceiling.jobs").fetchall()[0][0])


def ceiling_drain(dsn: str, conn: Conn, name: str, jobs: int, clients: int) -> DrainRun:
    """Drain ``jobs`` jobs with pgbench, ``clients`` connections, the ``name`` ceiling. No
    worker process runs, so its workers' CPU is 0; ``jobs`` of the run is what the timed
    pgbench run finished (a claim that raced another for the last rows may come up short)."""
    per_client = -(-jobs // (BATCH * clients))
    postmaster = postmaster_pid(conn)
    with tempfile.TemporaryDirectory(prefix="codity-ceiling-") as tmp:
        path = Path(tmp) / "script.sql"
        if name == CODITY_FUNCTIONS:
            wbase, qid = _load_codity(conn, jobs, clients)
            path.write_text(worker_loop_script())
            command = worker_loop_command(pgbench_path(), path, dsn, clients=clients,
                                          transactions=per_client, wbase=wbase, queue_id=qid,
                                          batch=BATCH)  # fmt: skip
            left = _codity_left
        elif name in (UPDATE_QUEUE, DELETE_QUEUE):
            _load_minimal(conn, jobs)
            path.write_text(_UPDATE_SCRIPT if name == UPDATE_QUEUE else _DELETE_SCRIPT)
            command = [str(pgbench_path()), "--no-vacuum", "--protocol=prepared",
                       f"--client={clients}", f"--jobs={clients}",
                       f"--transactions={per_client}", f"--file={path}", dsn]  # fmt: skip
            left = _minimal_left
        else:
            raise BenchError(f"no ceiling called {name!r}")
        before = read_usage(conn, postmaster)
        began = time.perf_counter()
        run = subprocess.run(command, capture_output=True, text=True, check=False)
        seconds = time.perf_counter() - began
        spent = spent_since(conn, before, postmaster)
    if run.returncode != 0 or "aborted" in run.stdout:
        raise BenchError(f"pgbench ({name}) failed:\n{run.stdout[-2000:]}{run.stderr[-2000:]}")
    finished = jobs - left(conn)
    if finished <= 0:
        raise BenchError(f"pgbench ({name}) finished no job:\n{run.stdout[-2000:]}")
    return DrainRun(finished, seconds, spent.wal_bytes, spent.server_cpu_s, workers_cpu_s=0.0)
