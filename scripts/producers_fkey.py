"""Several producers enqueueing into one queue, with and without the queue's foreign key.

    ./codity db start
    .venv/bin/python scripts/producers_fkey.py postgresql://postgres@127.0.0.1:55432/postgres \\
        [producers] [jobs each] [rounds]

Two scratch databases migrated from this checkout; in the second, ``jobs_queue_fkey`` is
dropped. Each round empties both job tables and drives each database in turn (the order
alternating): ``producers`` connections (8 by default) on threads, each calling
``codity.enqueue`` ``jobs each`` times (500), autocommit, one job per call, all into one
queue. Printed per drive: jobs per second, WAL bytes per job, and how many MultiXacts the
drive used (``mxid_age`` of the database before and after). docs/PERFORMANCE.md records
what it gave ("Several producers on one queue").
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

import psycopg

from codity.explain import scratch_database

URL = sys.argv[1]
PRODUCERS = int(sys.argv[2]) if len(sys.argv) > 2 else 8
EACH = int(sys.argv[3]) if len(sys.argv) > 3 else 500
ROUNDS = int(sys.argv[4]) if len(sys.argv) > 4 else 4
ENQUEUE = "SELECT job_id FROM codity.enqueue('q', 'noop')"
MXID_AGE = (
    "SELECT pg_catalog.mxid_age(d.datminmxid) FROM pg_catalog.pg_database d"
    " WHERE d.datname = pg_catalog.current_database()"
)


def _one(conn: psycopg.Connection[Any], query: str, params: list[Any] | None = None) -> Any:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]


def _produce(conn: psycopg.Connection[Any]) -> None:
    for _ in range(EACH):
        conn.execute(ENQUEUE, prepare=True).fetchall()


def drive(url: str) -> tuple[float, float, int]:
    """(jobs per second, WAL bytes per job, MultiXacts used) of one drive."""
    producers = [psycopg.connect(url, autocommit=True) for _ in range(PRODUCERS)]
    try:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute("TRUNCATE codity.jobs CASCADE")
            wal, multixacts = _one(admin, "SELECT pg_current_wal_lsn()"), _one(admin, MXID_AGE)
            threads = [threading.Thread(target=_produce, args=(c,)) for c in producers]
            start = time.perf_counter()
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            seconds = time.perf_counter() - start
            written = _one(admin, "SELECT pg_current_wal_lsn() - %s::pg_lsn", [wal])
            used = _one(admin, MXID_AGE) - multixacts
    finally:
        for conn in producers:
            conn.close()
    jobs = PRODUCERS * EACH
    return jobs / seconds, float(written) / jobs, int(used)


def main() -> None:
    with scratch_database(URL, "fkey") as keyed, scratch_database(URL, "nofkey") as unkeyed:
        for url in (keyed, unkeyed):
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("SELECT codity.create_queue('q')")
        with psycopg.connect(unkeyed, autocommit=True) as conn:
            conn.execute("ALTER TABLE codity.jobs DROP CONSTRAINT jobs_queue_fkey")
        both = [("with jobs_queue_fkey", keyed), ("without it", unkeyed)]
        for number in range(ROUNDS):
            for name, url in both if number % 2 == 0 else both[::-1]:
                per_second, wal, multixacts = drive(url)
                print(f"round {number + 1}  {name:20s} {per_second:7,.0f} jobs/s"
                      f"  {wal:5,.0f} B WAL per job  {multixacts:,} MultiXacts")  # fmt: skip


if __name__ == "__main__":
    main()
