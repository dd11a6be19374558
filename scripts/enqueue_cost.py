"""Server CPU and wall time per enqueued job, the function files as they are against a git ref.

    ./codity db start
    .venv/bin/python scripts/enqueue_cost.py postgresql://postgres@127.0.0.1:55432/postgres \
        [ref] [calls] [rounds]

Two scratch databases, both migrated from this checkout; in the second, the enqueue function
files as they were at ``ref`` (HEAD by default: the working tree's changes against the last
commit) are applied on top. Each round drives both, in turn (the order alternating), through
``calls`` (2,000 by default) ``codity.enqueue`` calls on one autocommit connection — a commit
each, as the bench's one-by-one enqueue — and then through ``calls / 100`` ``enqueue_many``
calls of 1,000 jobs. CPU per job is the backend's, from /proc (the server must run on this
machine, as the embedded one does); wall time per job is the client's. ``rounds`` rounds (6 by
default); the medians printed. docs/DESIGN_DECISIONS.md (51) records what it gave.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psycopg

from codity.bench._usage import process_cpu_s
from codity.explain import scratch_database

URL = sys.argv[1]
REF = sys.argv[2] if len(sys.argv) > 2 else "HEAD"
CALLS = int(sys.argv[3]) if len(sys.argv) > 3 else 2_000
ROUNDS = int(sys.argv[4]) if len(sys.argv) > 4 else 6
FILES = ("sql/functions/_job_spec_problem.sql", "sql/functions/enqueue.sql",
         "sql/functions/enqueue_many.sql")  # fmt: skip
ROOT = Path(__file__).resolve().parent.parent
BATCH = json.dumps([{"task": "t", "payload": {"n": i}} for i in range(1_000)])


def _at_ref(path: str) -> str:
    return subprocess.run(
        ["git", "show", f"{REF}:{path}"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout


def _drive(conn: psycopg.Connection, single: bool) -> tuple[float, float]:
    """CPU and wall µs per job over one drive."""
    pid = conn.info.backend_pid
    conn.execute("TRUNCATE codity.jobs CASCADE")
    cpu, wall = process_cpu_s(pid), time.perf_counter()
    if single:
        for _ in range(CALLS):
            conn.execute("SELECT * FROM codity.enqueue('q', 't', '{\"n\": 1}')", prepare=True)
        jobs = CALLS
    else:
        for _ in range(CALLS // 100):
            conn.execute("SELECT job_id FROM codity.enqueue_many('q', %s::jsonb)", [BATCH],
                         prepare=True)  # fmt: skip
        jobs = CALLS // 100 * 1_000
    after = process_cpu_s(pid)
    if cpu is None or after is None:
        raise SystemExit("the server's backend is not a process of this machine")
    return (after - cpu) / jobs * 1e6, (time.perf_counter() - wall) / jobs * 1e6


def main() -> None:
    with contextlib.ExitStack() as stack:
        dbs = {"now": stack.enter_context(scratch_database(URL, "enqueue_now")),
               REF: stack.enter_context(scratch_database(URL, "enqueue_ref"))}  # fmt: skip
        conns = {}
        for name, db in dbs.items():
            conn = stack.enter_context(psycopg.connect(db, autocommit=True))
            if name == REF:
                for path in FILES:
                    conn.execute(_at_ref(path))
            conn.execute("SELECT codity.create_queue('q')")
            conns[name] = conn
        for single in (True, False):
            found: dict[str, list[tuple[float, float]]] = {name: [] for name in dbs}
            for n in range(ROUNDS):
                for name in list(dbs) if n % 2 == 0 else list(reversed(dbs)):
                    found[name].append(_drive(conns[name], single))
            label = "enqueue, one by one" if single else "enqueue_many, 1,000 per call"
            for name, runs in found.items():
                cpu = statistics.median(r[0] for r in runs)
                wall = statistics.median(r[1] for r in runs)
                print(f"{label:30} {name:>8}: {cpu:7.1f} µs CPU, {wall:7.1f} µs wall per job")


if __name__ == "__main__":
    main()
