"""The drain's ceiling of two schemas side by side: which of two commits' SQL drains faster.

    ./codity db start
    git archive <commit> sql | tar -x -C /tmp/before
    .venv/bin/python scripts/ceiling_ab.py postgresql://postgres@127.0.0.1:55432/postgres \\
        /tmp/before/sql sql [rounds]

Two scratch databases on one server, each migrated from one ``sql/`` folder (through
CODITY_SQL_DIR), get 20,000 queued jobs per round and are drained alternately by pgbench
running the worker's own two statements (py/bench/_worker_loop.py: 2 clients, 100 jobs per
claim, no worker process). Prints each round and the medians in jobs/s. The worker's
statements are this checkout's, so both folders must accept them (since migration 0016
they call the functions by queue id). On a shared, noisy
machine only a difference larger than the rounds' spread means anything.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

from codity.bench._worker_loop import loop_workers, pgbench_path, worker_loop_script
from codity.explain import scratch_database

JOBS = 20_000
CLIENTS = 2
BATCH = 100


def _scratch(stack: contextlib.ExitStack, server_url: str, sql_folder: str) -> str:
    """A scratch database migrated from ``sql_folder`` (CODITY_SQL_DIR while it migrates),
    dropped when ``stack`` closes."""
    os.environ["CODITY_SQL_DIR"] = str(Path(sql_folder).resolve())
    try:
        return stack.enter_context(scratch_database(server_url, "codity_ab"))
    finally:
        del os.environ["CODITY_SQL_DIR"]


def _drain(url: str, queue: str, script: Path) -> float:
    batch = json.dumps([{"task": "noop", "payload": {"n": n}} for n in range(1_000)])
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT codity.create_queue(%s)", [queue])
        for _ in range(JOBS // 1_000):
            conn.execute("SELECT count(*) FROM codity.enqueue_many(%s, %s)", [queue, batch])
        conn.execute("VACUUM ANALYZE codity.jobs, codity.job_executions")
        wbase, queue_id = loop_workers(conn, queue, CLIENTS, queue)
        started = time.perf_counter()
        subprocess.run(
            [str(pgbench_path()), "-n", "-M", "prepared", "-c", str(CLIENTS),
             "-t", str(JOBS // CLIENTS // BATCH), "-f", str(script), "-D", f"queue={queue_id}",
             "-D", f"batch={BATCH}", "-D", f"wbase={wbase}", url],
            check=True, capture_output=True,
        )  # fmt: skip
        seconds = time.perf_counter() - started
        left = conn.execute(
            "SELECT count(*) FROM codity.jobs j JOIN codity.queues q ON q.id = j.queue_id"
            " WHERE q.name = %s AND j.status <> 'completed'",
            [queue],
        ).fetchall()[0][0]
        if left:
            raise SystemExit(f"{left} job(s) of {queue} were not drained")
    return JOBS / seconds


def main(server_url: str, first: str, second: str, rounds: int) -> None:
    script = Path(tempfile.mkstemp(suffix=".sql")[1])
    script.write_text(worker_loop_script())
    found: dict[str, list[float]] = {first: [], second: []}
    with contextlib.ExitStack() as stack:
        stack.callback(script.unlink)
        urls = {folder: _scratch(stack, server_url, folder) for folder in found}
        for n in range(rounds):
            for folder, url in urls.items():
                found[folder].append(_drain(url, f"round-{n}", script))
                print(f"round {n + 1}: {folder}: {found[folder][-1]:,.0f} jobs/s", flush=True)
    for folder, per_second in found.items():
        spread = f"{min(per_second):,.0f}-{max(per_second):,.0f}"
        print(f"{folder}: median {statistics.median(per_second):,.0f} jobs/s (rounds {spread})")


if __name__ == "__main__":
    if len(sys.argv) not in (4, 5):
        raise SystemExit(__doc__)
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) == 5 else 5)
