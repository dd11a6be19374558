"""The world the dashboard benchmark reads: a million jobs, their history, dead letters.

Built with set-based INSERT ... SELECT as the database owner (the SQL API would take an
hour to make a million jobs; the rows are the ones it would have written, every table
constraint checked): ten queues, twenty workers (four of them dead), twenty schedules, and
in ``jobs`` total:

====================  =========  ==========================================
state                 share      history
====================  =========  ==========================================
completed             80 %       one completed execution each
dead_letter           10 %       one failed execution each + a dead letter
queued (claimable)    5.8 %      none
scheduled             2 %        none (due within a day)
cancelled             2 %        none
running               0.2 %      none until its attempt ends (live worker)
====================  =========  ==========================================

Finishes are spread over the last 24 hours, so the last hour holds about 1/24 of the
history and ``codity.roll_up`` has a full hour to close. Payloads carry ``customer`` (one of
5,000) and ``region``, for the payload filter. Then VACUUM ANALYZE, as autovacuum would
have, so the planner and the visibility map see the data as a running system would.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from codity.web.passwords import hash_password

__all__ = ["OPERATOR_EMAIL", "OPERATOR_PASSWORD", "World", "build_world"]

log = logging.getLogger(__name__)

OPERATOR_EMAIL = "bench@codity.test"
OPERATOR_PASSWORD = "bench-operator-password"
QUEUES = ("emails", "reports", "webhooks", *(f"queue-{i:02d}" for i in range(4, 11)))
BATCH = 100_000
WORKFLOWS = 200  # of five nodes each, beside the jobs

# (status, share of the jobs); running rows need a live worker, so they come last.
_MIX = (
    ("completed", 0.80),
    ("dead_letter", 0.10),
    ("queued", 0.058),
    ("scheduled", 0.02),
    ("cancelled", 0.02),
    ("running", 0.002),
)

_JOBS = """
INSERT INTO codity.jobs (queue_id, project_id, task, payload, priority, status, run_at, attempt,
                         max_attempts, execution_seq, worker_id, claimed_at, started_at,
                         lock_expires_at, finished_at, last_error, created_at, updated_at)
SELECT q.ids[1 + i %% array_length(q.ids, 1)],
       q.projects[1 + i %% array_length(q.ids, 1)],
       'task.' || (i %% 7),
       jsonb_build_object('customer', i %% 5000, 'region', (ARRAY['eu', 'us', 'ap'])[1 + i %% 3]),
       (i %% 3) - 1,
       %(status)s::codity.job_status,
       CASE %(status)s WHEN 'scheduled' THEN now() + make_interval(secs => 60 + i %% 86400)
                       ELSE t.at END,
       CASE WHEN %(status)s IN ('completed', 'dead_letter', 'running') THEN 1 ELSE 0 END,
       CASE %(status)s WHEN 'dead_letter' THEN 1 ELSE 3 END,
       CASE WHEN %(status)s IN ('completed', 'dead_letter', 'running') THEN 1 ELSE 0 END,
       CASE %(status)s WHEN 'running' THEN w.ids[1 + i %% array_length(w.ids, 1)] END,
       CASE WHEN %(status)s IN ('completed', 'dead_letter', 'running') THEN t.at END,
       CASE WHEN %(status)s IN ('completed', 'dead_letter', 'running') THEN t.at END,
       CASE %(status)s WHEN 'running' THEN now() + interval '1 hour' END,
       CASE WHEN %(status)s IN ('completed', 'dead_letter', 'cancelled')
            THEN t.at + interval '80 milliseconds' END,
       CASE %(status)s WHEN 'dead_letter' THEN 'BenchError: simulated failure ' || i END,
       t.at - interval '1 second',
       now()
FROM generate_series(%(first)s::integer, %(last)s::integer) AS i
CROSS JOIN LATERAL (SELECT now() - make_interval(secs => (i %% 86400)::float8 + 2) AS at) t
CROSS JOIN (SELECT array_agg(id ORDER BY id) AS ids, array_agg(project_id ORDER BY id) AS projects
            FROM codity.queues) q
CROSS JOIN (SELECT array_agg(id ORDER BY id) AS ids FROM codity.workers
            WHERE status = 'active') w
"""

_EXECUTIONS = """
INSERT INTO codity.job_executions (job_id, queue_id, project_id, execution_seq, attempt,
                                   worker_id, status, claimed_at, started_at, finished_at, error,
                                   result)
SELECT j.id, j.queue_id, j.project_id, 1, 1,
       coalesce(j.worker_id, w.ids[1 + j.id %% array_length(w.ids, 1)]),
       CASE j.status WHEN 'completed' THEN 'completed'::codity.execution_status
                     ELSE 'failed'::codity.execution_status END,
       j.claimed_at, j.started_at, j.finished_at, j.last_error,
       CASE j.status WHEN 'completed' THEN '{"ok": true}'::jsonb END
FROM codity.jobs j
CROSS JOIN (SELECT array_agg(id ORDER BY id) AS ids FROM codity.workers) w
WHERE j.status IN ('completed', 'dead_letter')
  AND j.id BETWEEN %(lo)s::bigint AND %(hi)s::bigint
"""

_DEAD_LETTERS = """
INSERT INTO codity.dead_letters (job_id, queue_id, project_id, task, payload, priority, reason,
                                 error, attempts, dead_at)
SELECT j.id, j.queue_id, j.project_id, j.task, j.payload, j.priority, 'max_attempts',
       j.last_error, 1, j.finished_at
FROM codity.jobs j
WHERE j.status = 'dead_letter'
"""


@dataclass(frozen=True)
class World:
    jobs: int
    executions: int
    failed_executions: int
    dead_letters: int
    seconds: float
    sample_job: int
    sample_dead_letter: int
    sample_worker: int
    sample_dead_worker: int
    sample_schedule: str
    sample_workflow: int


def _one(conn: psycopg.Connection[Any], query: str, params: Any = None) -> Any:
    found = conn.execute(query, params).fetchone()
    assert found is not None, query
    return found[0]


def _base(conn: psycopg.Connection[Any]) -> None:
    for name in QUEUES:
        conn.execute("SELECT * FROM codity.create_queue(%s)", [name])
    for i in range(1, 21):
        conn.execute(
            "SELECT codity.register_worker(%s, ARRAY[%s], 50, 'bench-host', %s)",
            [f"worker-{i:02d}", QUEUES[i % len(QUEUES)], 10_000 + i],
        )
    conn.execute(
        "UPDATE codity.workers SET status = 'dead', stopped_at = now() - interval '1 hour',"
        " last_heartbeat_at = now() - interval '1 hour' WHERE name IN"
        " ('worker-17', 'worker-18', 'worker-19', 'worker-20')"
    )
    for i in range(1, 21):
        conn.execute(
            "SELECT * FROM codity.create_schedule(%s, %s, %s, 'task.cron', '{}')",
            [f"schedule-{i:02d}", QUEUES[i % len(QUEUES)], f"*/{1 + i % 15} * * * *"],
        )
    user = _one(
        conn,
        "INSERT INTO codity.users (email, display_name, password_hash) VALUES (%s, 'Bench', %s)"
        " RETURNING id",
        [OPERATOR_EMAIL, hash_password(OPERATOR_PASSWORD)],
    )
    conn.execute(
        "INSERT INTO codity.memberships (org_id, user_id, role)"
        " SELECT p.org_id, %s, 'owner' FROM codity.projects p WHERE p.is_default",
        [user],
    )


def _workflows(conn: psycopg.Connection[Any]) -> None:
    """A few hundred workflows beside the jobs, for the workflow pages: each a fan-out of
    four nodes into a fifth, as a report built from parts would be."""
    for i in range(WORKFLOWS):
        queue = QUEUES[i % len(QUEUES)]
        parts = [{"key": f"part-{n}", "queue": queue, "task": "task.part"} for n in range(4)]
        join = {"key": "join", "queue": queue, "task": "task.join",
                "after": [p["key"] for p in parts]}  # fmt: skip
        conn.execute(
            "SELECT count(*) FROM codity.enqueue_workflow(%s)",
            [Jsonb({"name": f"report-{i:04d}", "nodes": [*parts, join]})],
        )


def build_world(url: str, jobs: int) -> World:
    """Load ``jobs`` jobs (and their history) into the migrated database at ``url``."""
    began = time.monotonic()
    with psycopg.connect(url, autocommit=True) as conn:
        _base(conn)
        first = 1
        for status, share in _MIX:
            count = max(1, round(jobs * share)) if status != "queued" else 0
            if status == "queued":
                count = jobs - sum(max(1, round(jobs * s)) for st, s in _MIX if st != "queued")
            last = first + count - 1
            for lo in range(first, last + 1, BATCH):
                hi = min(last, lo + BATCH - 1)
                conn.execute(_JOBS, {"status": status, "first": lo, "last": hi})
                log.info("jobs %s: %d..%d", status, lo, hi)
            first = last + 1
        top = _one(conn, "SELECT max(id) FROM codity.jobs")
        for lo in range(0, top + 1, BATCH):
            conn.execute(_EXECUTIONS, {"lo": lo, "hi": lo + BATCH - 1})
        conn.execute(_DEAD_LETTERS)
        _workflows(conn)
        conn.execute("VACUUM ANALYZE")
        conn.execute("UPDATE codity.rollup_state SET rolled_until = NULL")
        conn.execute("SELECT codity.roll_up()")
        return World(
            jobs=_one(conn, "SELECT count(*) FROM codity.jobs"),
            executions=_one(conn, "SELECT count(*) FROM codity.job_executions"),
            failed_executions=_one(
                conn, "SELECT count(*) FROM codity.job_executions WHERE status = 'failed'"
            ),
            dead_letters=_one(conn, "SELECT count(*) FROM codity.dead_letters"),
            seconds=time.monotonic() - began,
            sample_job=_one(conn, "SELECT max(job_id) FROM codity.dead_letters"),
            sample_dead_letter=_one(conn, "SELECT max(id) FROM codity.dead_letters"),
            sample_worker=_one(conn, "SELECT min(id) FROM codity.workers WHERE status = 'active'"),
            sample_dead_worker=_one(
                conn, "SELECT min(id) FROM codity.workers WHERE status = 'dead'"
            ),
            sample_schedule="schedule-01",
            sample_workflow=_one(conn, "SELECT max(id) FROM codity.workflows"),
        )
