"""The ceiling drains of ``codity bench --against pgqueuer`` really drain, with real pgbench.

pgbench (the embedded wheel's) runs each of the three scripts against a migrated database:
every job must be finished by the timed run itself, and for Codity's functions each job
must have gone through the worker's own statements — completed, with exactly one execution
row, closed as completed.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from codity.bench._ceiling import CEILINGS, CLIENTS, CODITY_FUNCTIONS, ceiling_drain

JOBS = 1_000


@pytest.mark.parametrize("name", CEILINGS)
def test_each_ceiling_drains_every_job_within_the_timed_run(
    db_url: str, conn: psycopg.Connection[Any], name: str
) -> None:
    conn.autocommit = True
    run = ceiling_drain(db_url, conn, name, JOBS, CLIENTS)

    assert run.jobs == JOBS
    assert run.workers_cpu_s == 0.0, "no worker process takes part"
    assert run.seconds > 0 and run.per_second > 0
    assert run.wal_bytes > 0, "a drain that writes nothing did not drain"
    if name == CODITY_FUNCTIONS:
        rows = conn.execute(
            "SELECT j.status::text, count(x.job_id), bool_and(x.status = 'completed')"
            " FROM codity.jobs j LEFT JOIN codity.job_executions x ON x.job_id = j.id"
            " GROUP BY j.id, j.status"
        ).fetchall()
        assert len(rows) == JOBS
        assert {(status, n, done) for status, n, done in rows} == {("completed", 1, True)}
    else:
        assert conn.execute("SELECT count(*) FROM ceiling.jobs").fetchall() == [(0,)]
