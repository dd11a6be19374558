"""WAL written per job by the SQL hot path, with and without the indexes the dashboard added.

    ./codity db start
    .venv/bin/python scripts/wal_per_job.py postgresql://postgres@127.0.0.1:55432/postgres

Each variant gets a scratch database (migrated, then the variant's indexes dropped or
added), 20,000 jobs with a one-key payload enqueued in batches of 1,000 and VACUUMed, then
driven by one connection through codity.claim, start_many and complete_many in batches of
100 — the statements a worker sends, without a worker. WAL per job is
pg_wal_lsn_diff over the drive divided by the jobs; three runs per variant, the median
printed. Issue 12 weighs these against the dashboard's reads (docs/PERFORMANCE.md).
"""

from __future__ import annotations

import sys

import psycopg

from codity.explain import scratch_database

JOBS = 20_000
BATCH = 100
STATE_PARTIALS = ["jobs_completed_idx", "jobs_failed_idx", "jobs_dead_letter_idx",
                  "jobs_cancelled_idx"]  # fmt: skip
VARIANTS: list[tuple[str, list[str]]] = [
    ("as migrated", []),
    ("with 0009's (queue_id, status, id)",
     ["CREATE INDEX probe ON codity.jobs (queue_id, status, id)"]),
    ("without jobs_payload_idx (GIN)", ["DROP INDEX codity.jobs_payload_idx"]),
    ("without the state partials", [f"DROP INDEX codity.{i}" for i in STATE_PARTIALS]),
    ("without GIN, state partials, finished", [
        "DROP INDEX codity.jobs_payload_idx",
        *(f"DROP INDEX codity.{i}" for i in STATE_PARTIALS),
        "DROP INDEX codity.job_executions_finished_idx",
    ]),
]  # fmt: skip


def wal_per_job(server_url: str, changes: list[str]) -> float:
    with (
        scratch_database(server_url, "walprobe") as url,
        psycopg.connect(url, autocommit=True) as c,
    ):
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
        start = (c.execute("SELECT pg_current_wal_insert_lsn()").fetchone() or ("0/0",))[0]
        done = 0
        while done < JOBS:
            claimed = c.execute(
                "SELECT job_id, fence FROM codity.claim(%s, 'q', %s)", [worker, BATCH]
            ).fetchall()
            if not claimed:
                break
            ids, fences = [r[0] for r in claimed], [r[1] for r in claimed]
            c.execute("SELECT * FROM codity.start_many(%s::bigint[], %s::integer[])", [ids, fences])
            c.execute(
                "SELECT * FROM codity.complete_many(%s::bigint[], %s::integer[], %s::jsonb[])",
                [ids, fences, [None] * len(ids)],
            )
            done += len(ids)
        if done != JOBS:
            raise RuntimeError(f"drove {done} of {JOBS} jobs")
        wal = c.execute(
            "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %s)", [start]
        ).fetchone()
        return float((wal or (0,))[0]) / JOBS


def main(server_url: str) -> None:
    for label, changes in VARIANTS:
        runs = sorted(wal_per_job(server_url, changes) for _ in range(3))
        shown = ", ".join(f"{r:.0f}" for r in runs)
        print(f"{label:40s} {runs[1]:6.0f} B/job  (runs {shown})", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
