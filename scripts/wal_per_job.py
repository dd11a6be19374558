"""WAL written per job by the worker's statements, and where it goes.

    ./codity db start
    .venv/bin/python scripts/wal_per_job.py postgresql://postgres@127.0.0.1:55432/postgres

Each variant gets a scratch database (migrated, then the variant's indexes dropped), 20,000
jobs with a one-key payload enqueued in batches of 1,000 and VACUUMed, then driven by one
connection through the worker's own two statements (codity.worker.claim.CLAIM_AND_START,
codity.worker.reporter.COMPLETE_MANY) in batches of 100 — a worker's writes, without a
worker. WAL per job is the insert position's advance over the drive divided by the jobs;
three runs per variant, the median printed.

Then, for the schema as migrated, where the bytes go (pg_walinspect, in the scratch
database): per resource manager (heap rows, B-tree and GIN entries, commits, full-page
images) and per relation (block data and full-page images of each table and index).
Issue 12 weighs these (docs/PERFORMANCE.md).
"""

from __future__ import annotations

import sys
from typing import Any

import psycopg

from codity.explain import scratch_database
from codity.worker.claim import CLAIM_AND_START
from codity.worker.reporter import COMPLETE_MANY

JOBS = 20_000
BATCH = 100
VARIANTS: list[tuple[str, list[str]]] = [
    ("as migrated", []),
    ("without jobs_payload_idx (GIN)", ["DROP INDEX codity.jobs_payload_idx"]),
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


def _drive(c: psycopg.Connection[Any], changes: list[str]) -> tuple[str, str]:
    """Enqueue and drain JOBS jobs; the WAL insert positions before and after the drain."""
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
    done = 0
    qid = c.execute("SELECT queue_id FROM codity.worker_queues(%s)", [worker]).fetchall()[0][0]
    claim = {"worker": worker, "queue_id": qid, "limit": BATCH, "suspects": True}
    while done < JOBS:
        claimed = c.execute(CLAIM_AND_START, claim).fetchall()
        if not claimed:
            break
        ids, fences = [r[0] for r in claimed], [r[1] for r in claimed]
        refused = c.execute(COMPLETE_MANY, [qid, ids, fences, [None] * len(ids)]).fetchall()
        if refused:
            raise RuntimeError(f"completions refused: {refused[:3]}")
        done += len(ids)
    if done != JOBS:
        raise RuntimeError(f"drove {done} of {JOBS} jobs")
    end = str((c.execute("SELECT pg_current_wal_insert_lsn()").fetchone() or ("0/0",))[0])
    return start, end


def wal_per_job(server_url: str, changes: list[str], *, explain: bool = False) -> float:
    with (
        scratch_database(server_url, "walprobe") as url,
        psycopg.connect(url, autocommit=True) as c,
    ):
        start, end = _drive(c, changes)
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
        return per_job


def main(server_url: str) -> None:
    for label, changes in VARIANTS:
        runs = sorted(wal_per_job(server_url, changes) for _ in range(3))
        shown = ", ".join(f"{r:.0f}" for r in runs)
        print(f"{label:40s} {runs[1]:6.0f} B/job  (runs {shown})", flush=True)
    wal_per_job(server_url, [], explain=True)


if __name__ == "__main__":
    main(sys.argv[1])
