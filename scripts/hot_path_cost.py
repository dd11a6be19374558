"""Server CPU and wall time per job on the hot path: the function files as they are, against
the same files at a git ref.

    ./codity db start
    .venv/bin/python scripts/hot_path_cost.py postgresql://postgres@127.0.0.1:55432/postgres \
        [ref] [jobs] [rounds] [batch]

Two scratch databases, both migrated from this checkout; in the second, every file of
sql/functions/ as it was at ``ref`` (HEAD by default: the working tree's changes against
the last commit) is re-applied on top. A ``ref`` of the form ``sql:<statements>`` runs
those statements in the second database instead, to weigh a schema change (``sql:DROP
INDEX codity.jobs_finished_idx``: what that index costs). Each round drives both, in turn (the order
alternating), through three drives on one autocommit connection, ``jobs`` jobs each (2,000 by
default):

- ``enqueue``: ``codity.enqueue`` once per job, a commit each (the bench's one-by-one);
- ``enqueue_many``: ``codity.enqueue_many`` with 1,000 jobs per call;
- ``claim+complete``: the worker's own two statements (claim_in_queue with p_start, then
  complete_many_in_queue with its relaxed commit) on ``batch`` jobs per call (5 by default,
  the default capacity), over the jobs the previous drives enqueued, once analyzed (the
  table's statistics decide whether a statement gets a plan of its own at every call).

CPU per job is the backend's, from /proc (the server must run on this machine, as the
embedded one does); wall time per job is the client's. ``rounds`` rounds (6 by default);
the medians printed. docs/DESIGN_DECISIONS.md (51) and docs/PERFORMANCE.md record what it
gave.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from codity.bench._usage import process_cpu_s
from codity.bench._worker_loop import drain_as_the_worker
from codity.explain import scratch_database

URL = sys.argv[1]
REF = sys.argv[2] if len(sys.argv) > 2 else "HEAD"
JOBS = int(sys.argv[3]) if len(sys.argv) > 3 else 2_000
ROUNDS = int(sys.argv[4]) if len(sys.argv) > 4 else 6
BATCH = int(sys.argv[5]) if len(sys.argv) > 5 else 5
ROOT = Path(__file__).resolve().parent.parent
Conn = psycopg.Connection[Any]


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True,
                          text=True).stdout  # fmt: skip


def _apply_ref(conn: Conn) -> None:
    """The function files at REF, in name order, as migrate applies them: as codity_owner,
    so that a function the ref has and this checkout has not is owned like the rest."""
    names = sorted(_git("ls-tree", "--name-only", f"{REF}:sql/functions").split())
    conn.execute("SET check_function_bodies = off")
    conn.execute("SET ROLE codity_owner")
    for name in names:
        conn.execute(_git("show", f"{REF}:sql/functions/{name}").encode())
    conn.execute("RESET ROLE")
    conn.execute("RESET check_function_bodies")


def _enqueue(conn: Conn) -> int:
    for _ in range(JOBS):
        conn.execute("SELECT * FROM codity.enqueue('q', 't', '{\"n\": 1}')", prepare=True)
    return JOBS


def _enqueue_many(conn: Conn) -> int:
    batch = json.dumps([{"task": "t", "payload": {"n": i}} for i in range(1_000)])
    for _ in range(JOBS // 1_000):
        conn.execute("SELECT job_id FROM codity.enqueue_many('q', %s::jsonb)", [batch],
                     prepare=True)  # fmt: skip
    return JOBS // 1_000 * 1_000


def _claim_complete(conn: Conn) -> int:
    conn.execute("VACUUM ANALYZE codity.jobs")  # as the bench does, and autovacuum would
    worker = conn.execute("SELECT codity.register_worker('probe', ARRAY['q'], %s)", [BATCH])
    worker_id = (worker.fetchone() or (0,))[0]
    qid = conn.execute("SELECT queue_id FROM codity.worker_queues(%s)", [worker_id]).fetchall()
    done = drain_as_the_worker(conn, worker_id, qid[0][0], BATCH)
    conn.execute("SELECT codity.deregister_worker(%s)", [worker_id])
    return done


def _measure(conn: Conn, drive: Callable[[Conn], int]) -> tuple[float, float]:
    """CPU and wall µs per job over one drive."""
    pid = conn.info.backend_pid
    cpu, wall = process_cpu_s(pid), time.perf_counter()
    jobs = drive(conn)
    after = process_cpu_s(pid)
    if cpu is None or after is None:
        raise SystemExit("the server's backend is not a process of this machine")
    return (after - cpu) / jobs * 1e6, (time.perf_counter() - wall) / jobs * 1e6


DRIVES = {"enqueue": _enqueue, "enqueue_many": _enqueue_many, "claim+complete": _claim_complete}


def main() -> None:
    with contextlib.ExitStack() as stack:
        names = ("now", REF)
        conns = {}
        for name in names:
            conn = stack.enter_context(
                psycopg.connect(stack.enter_context(scratch_database(URL, "hot_path")),
                                autocommit=True))  # fmt: skip
            if name == REF and REF.startswith("sql:"):
                conn.execute(REF.removeprefix("sql:").encode())
            elif name == REF:
                _apply_ref(conn)
            conn.execute("SELECT codity.create_queue('q')")
            conns[name] = conn
        found: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for n in range(ROUNDS):
            for name in names if n % 2 == 0 else tuple(reversed(names)):
                conns[name].execute("TRUNCATE codity.jobs, codity.job_executions")
                for drive, run in DRIVES.items():
                    found.setdefault((drive, name), []).append(_measure(conns[name], run))
        for (drive, name), runs in found.items():
            cpu = statistics.median(r[0] for r in runs)
            wall = statistics.median(r[1] for r in runs)
            print(f"{drive:15} {name[:30]:>30}: {cpu:7.1f} µs CPU, {wall:7.1f} µs wall per job")


if __name__ == "__main__":
    main()
