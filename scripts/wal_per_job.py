"""WAL written and server CPU spent per job by the worker's statements, and where the WAL goes.

    ./codity db start
    .venv/bin/python scripts/wal_per_job.py postgresql://postgres@127.0.0.1:55432/postgres \
        [jobs] [batch] [runs]

Each variant gets a scratch database (migrated, then the variant's changes made), ``jobs``
jobs (20,000 by default) with a one-key payload enqueued in batches of 1,000 and VACUUMed,
then driven by one connection through the worker's own two statements
(codity.worker.claim.CLAIM_AND_START, codity.worker.reporter.COMPLETE_MANY) in batches of
``batch`` (100 by default) — a worker's writes, without a worker. WAL per job is the insert
position's advance over the drive divided by the jobs; CPU per job is that of the one
backend over the drive, from /proc (shown when the server runs on this machine, as the
embedded one does). ``runs`` rounds (3 by default), each variant once per round, in turn;
the medians printed.

Then, for the schema as migrated, where the bytes go (pg_walinspect, in the scratch
database): per resource manager (heap rows, B-tree and GIN entries, commits, full-page
images) and per relation (block data and full-page images of each table and index).
Issue 12 weighs these (docs/PERFORMANCE.md).
"""

from __future__ import annotations

import statistics
import sys
from typing import Any

import psycopg

from codity.bench._usage import process_cpu_s
from codity.explain import scratch_database
from codity.bench._worker_loop import drain_as_the_worker

JOBS = int(sys.argv[2]) if len(sys.argv) > 2 else 20_000
BATCH = int(sys.argv[3]) if len(sys.argv) > 3 else 100
RUNS = int(sys.argv[4]) if len(sys.argv) > 4 else 3
_FULL_GIN = ("CREATE INDEX jobs_payload_idx ON codity.jobs"
             " USING gin (payload jsonb_path_ops) WITH (fastupdate = off)")  # fmt: skip
VARIANTS: list[tuple[str, list[str]]] = [
    ("as migrated", []),
    ("without jobs_finished_idx (before 0021)", ["DROP INDEX codity.jobs_finished_idx"]),
    ("without jobs_payload_idx (GIN)", ["DROP INDEX codity.jobs_payload_idx"]),
    ("GIN on held jobs too (before 0017)", ["DROP INDEX codity.jobs_payload_idx", _FULL_GIN]),
    ("executions referencing their queue (0018)", [
        "ALTER TABLE codity.job_executions ADD CONSTRAINT job_executions_queue_fkey FOREIGN KEY"
        " (queue_id, project_id) REFERENCES codity.queues (id, project_id) ON DELETE CASCADE"]),
    ("executions referencing jobs (before 0018)", [
        "ALTER TABLE codity.job_executions ADD CONSTRAINT job_executions_job_fkey FOREIGN KEY"
        " (queue_id, job_id) REFERENCES codity.jobs (queue_id, id) ON DELETE CASCADE"]),
    ("jobs at fillfactor 100 (before 0013)", ["ALTER TABLE codity.jobs SET (fillfactor = 100)"]),
    ("GIN with its pending list (before 0013)",
     ["ALTER INDEX codity.jobs_payload_idx SET (fastupdate = on)"]),
    ("without the state partials", [
        f"DROP INDEX codity.jobs_{s}_idx" for s in ("completed", "failed", "dead_letter",
                                                    "cancelled")
    ]),
]  # fmt: skip
_BY_MANAGER = """
SELECT s."resource_manager/record_type", s.count, s.record_size, s.fpi_size
FROM pg_get_wal_stats(%(start)s::pg_lsn, %(end)s::pg_lsn, per_record => true) s
WHERE s.count >= %(jobs)s / 100
ORDER BY s.combined_size DESC
"""
_BY_RELATION = """
SELECT coalesce(pg_filenode_relation(b.reltablespace, b.relfilenode)::text,
                'filenode ' || b.relfilenode) AS relation,
       sum(b.block_data_length) AS data, sum(b.block_fpi_length) AS fpi
FROM pg_get_wal_block_info(%(start)s::pg_lsn, %(end)s::pg_lsn) b
WHERE b.reldatabase = (SELECT oid FROM pg_database WHERE datname = current_database())
GROUP BY 1
ORDER BY sum(b.block_data_length) + sum(b.block_fpi_length) DESC
"""


def _backend_cpu_s(c: psycopg.Connection[Any]) -> float | None:
    """The CPU time of this connection's backend so far, if it runs on this machine."""
    return process_cpu_s(int((c.execute("SELECT pg_backend_pid()").fetchone() or (0,))[0]))


def _drive(c: psycopg.Connection[Any], changes: list[str]) -> tuple[str, str, float | None]:
    """Enqueue and drain JOBS jobs; the WAL insert positions before and after the drain, and
    the backend's CPU seconds over it."""
    for change in changes:
        c.execute(change.encode())
    c.execute("SELECT * FROM codity.create_queue('q')")
    for first in range(1, JOBS + 1, 1000):
        c.execute(
            "SELECT count(*) FROM codity.enqueue_many('q', (SELECT jsonb_agg("
            "jsonb_build_object('task', 't', 'payload', jsonb_build_object('n', i)))"
            " FROM generate_series(%s::int, %s::int) i))",
            [first, first + 999],
        )
    c.execute("VACUUM ANALYZE")
    row = c.execute("SELECT codity.register_worker('probe', ARRAY['q'], %s)", [BATCH])
    worker = (row.fetchone() or (0,))[0]
    start = str((c.execute("SELECT pg_current_wal_insert_lsn()").fetchone() or ("0/0",))[0])
    cpu_before = _backend_cpu_s(c)
    qid = c.execute("SELECT queue_id FROM codity.worker_queues(%s)", [worker]).fetchall()[0][0]
    done = drain_as_the_worker(c, worker, qid, BATCH)
    if done != JOBS:
        raise RuntimeError(f"drove {done} of {JOBS} jobs")
    cpu_after = _backend_cpu_s(c)
    end = str((c.execute("SELECT pg_current_wal_insert_lsn()").fetchone() or ("0/0",))[0])
    cpu = None if cpu_before is None or cpu_after is None else cpu_after - cpu_before
    return start, end, cpu


def wal_per_job(
    server_url: str, changes: list[str], *, explain: bool = False
) -> tuple[float, float | None]:
    """WAL bytes and backend CPU microseconds (None: not on this machine) per job."""
    with (
        scratch_database(server_url, "walprobe") as url,
        psycopg.connect(url, autocommit=True) as c,
    ):
        start, end, cpu = _drive(c, changes)
        wal = c.execute("SELECT pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)", [end, start])
        per_job = float((wal.fetchone() or (0,))[0]) / JOBS
        if explain:
            c.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
            lsns = {"start": start, "end": end, "jobs": JOBS}
            print(f"\nwhere {per_job:.0f} B per job go, by record type (B per job):")
            for manager, count, record, fpi in c.execute(_BY_MANAGER, lsns).fetchall():
                print(f"  {manager:24s} {count / JOBS:5.2f} records  {record / JOBS:6.0f} B"
                      f" + {fpi / JOBS:5.0f} B of full-page images")  # fmt: skip
            print("by relation (block data + full-page images, B per job):")
            for relation, data, fpi in c.execute(_BY_RELATION, lsns).fetchall():
                print(f"  {relation:40s} {data / JOBS:6.0f} + {fpi / JOBS:5.0f}")
        return per_job, None if cpu is None else cpu / JOBS * 1e6


def main(server_url: str) -> None:
    print(f"{JOBS:,} jobs, claims and completion batches of {BATCH}, {RUNS} rounds", flush=True)
    found: dict[str, list[tuple[float, float | None]]] = {label: [] for label, _ in VARIANTS}
    for _ in range(RUNS):
        for label, changes in VARIANTS:
            found[label].append(wal_per_job(server_url, changes))
    for label, runs in found.items():
        wal = sorted(w for w, _ in runs)
        cpus = [c for _, c in runs if c is not None]
        cpu = f"{statistics.median(cpus):6.1f} µs/job" if len(cpus) == len(runs) else "CPU n/a"
        shown = ", ".join(f"{w:.0f}" for w in wal)
        print(f"{label:40s} {statistics.median(wal):6.0f} B/job  {cpu}  (WAL runs {shown})")
    wal_per_job(server_url, [], explain=True)


if __name__ == "__main__":
    main(sys.argv[1])
