"""``codity demo``: the seed's demo data set, built through the SQL API.

Three queues with differing retry policies (emails, reports, webhooks), a cron schedule
firing every minute, jobs waiting to run, and history: a seeding worker claims some jobs
and completes, fails (retry history) or exhausts them (dead letters) through the same
functions a real worker uses, so the dashboard and ``codity status`` have something to show
before any worker has run. Reset first: everything in the default project goes; then
nothing is left paused.

Each statement commits on its own (an autocommit connection), not the whole seeding in one
transaction: on a Citus cluster the job tables are distributed and the queues, projects
and users are reference tables, and Citus refuses a transaction that writes the job shards
over several connections and then a reference table they point at (the reset deletes
executions of every queue, then the queues). It also lets each worker call be sent whole to
the node of its queue, as a real worker's is. A seeding that fails halfway leaves part of
the demo behind; running it again resets and seeds it whole.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from codity.db.conninfo import conninfo

__all__ = ["DEMO_OPERATOR_EMAIL", "DEMO_OPERATOR_PASSWORD", "QUEUES", "seed_demo"]

# The seed's demo login: owner of the default org, whose default project holds the demo.
DEMO_OPERATOR_EMAIL = "operator@codity.test"
DEMO_OPERATOR_PASSWORD = "correct-horse-battery-staple"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class QueueSpec:
    name: str
    task: str
    max_attempts: int
    backoff: str
    base_delay_ms: int
    max_delay_ms: int
    lease_seconds: int
    job_timeout_seconds: int | None


QUEUES = (
    QueueSpec("emails", "emails.send", 5, "exponential", 1_000, 60_000, 30, 30),
    QueueSpec("reports", "reports.generate", 3, "linear", 5_000, 30_000, 60, 120),
    QueueSpec("webhooks", "webhooks.deliver", 8, "fixed", 2_000, 2_000, 30, 15),
)


def _reset(conn: psycopg.Connection[Any]) -> None:
    default_queues = (
        "SELECT q.id FROM codity.queues q JOIN codity.projects p ON p.id = q.project_id"
        " WHERE p.is_default"
    )
    # Execution rows carry no foreign key (migration 0019): no cascade takes them.
    conn.execute(f"DELETE FROM codity.job_executions WHERE queue_id IN ({default_queues})")
    conn.execute(f"DELETE FROM codity.queues WHERE id IN ({default_queues})")
    # Worker ids on jobs and executions are not foreign keys (migration 0014): a reset that
    # removes workers clears what referred to them first.
    gone = "(SELECT id FROM codity.workers WHERE status <> 'active')"
    conn.execute(f"UPDATE codity.jobs SET worker_id = NULL WHERE worker_id IN {gone}")
    conn.execute(f"UPDATE codity.job_executions SET worker_id = NULL WHERE worker_id IN {gone}")
    conn.execute("DELETE FROM codity.workers WHERE status <> 'active'")


def _create_queues(conn: psycopg.Connection[Any]) -> None:
    for q in QUEUES:
        conn.execute(
            "SELECT * FROM codity.create_queue(%s, NULL, %s, %s, %s, %s, %s, 5, %s)",
            [q.name, q.max_attempts, q.backoff, q.base_delay_ms, q.max_delay_ms, q.lease_seconds,
             q.job_timeout_seconds],
        )  # fmt: skip
    conn.execute(
        "SELECT * FROM codity.create_schedule('reports-every-minute', 'reports', '* * * * *', "
        "'reports.generate', %s)",
        [Jsonb({"report": "throughput", "failure_rate": 0.1})],
    )


def _operator(conn: psycopg.Connection[Any]) -> None:
    """The demo login, owner of the default org (so of the demo project); password reset."""
    from codity.web.passwords import hash_password

    row = conn.execute(
        "INSERT INTO codity.users (email, display_name, password_hash) VALUES (%s, %s, %s) "
        "ON CONFLICT (email) DO UPDATE SET password_hash = EXCLUDED.password_hash RETURNING id",
        [DEMO_OPERATOR_EMAIL, "Demo Operator", hash_password(DEMO_OPERATOR_PASSWORD)],
    ).fetchone()
    assert row is not None
    conn.execute(
        "INSERT INTO codity.memberships (org_id, user_id, role) "
        "SELECT p.org_id, %s, 'owner' FROM codity.projects p WHERE p.is_default "
        "ON CONFLICT (org_id, user_id) DO UPDATE SET role = 'owner'",
        [row[0]],
    )


def _enqueue(conn: psycopg.Connection[Any], queue: str, jobs: list[dict[str, Any]]) -> list[int]:
    rows = conn.execute(
        "SELECT job_id FROM codity.enqueue_many(%s, %s)", [queue, Jsonb(jobs)]
    ).fetchall()
    return [r[0] for r in rows]


def _jobs(task: str, payloads: list[dict[str, Any]], **extra: Any) -> list[dict[str, Any]]:
    return [{"task": task, "payload": p, **extra} for p in payloads]


def _history(conn: psycopg.Connection[Any]) -> None:
    """Run a few jobs through the real protocol, as a worker would, to leave history behind."""
    row = conn.execute(
        "SELECT codity.register_worker('demo-seeder', ARRAY['emails', 'webhooks'], 50, 'demo')"
    ).fetchone()
    assert row is not None
    worker = row[0]
    # emails: 12 succeed, 6 fail once (retry history), 2 are rejected permanently.
    _enqueue(
        conn, "emails", _jobs("emails.send", [{"to": f"user{i}@example.com"} for i in range(20)])
    )
    # webhooks: 3 endpoints that fail on their only attempt (dead letters).
    hooks = [{"url": f"https://hooks.example/{i}", "failure_rate": 1.0} for i in range(3)]
    _enqueue(conn, "webhooks", _jobs("webhooks.deliver", hooks, max_attempts=1))

    claimed = conn.execute(
        "SELECT job_id, fence FROM codity.claim(%s, 'emails', 20)", [worker]
    ).fetchall()
    claimed += conn.execute(
        "SELECT job_id, fence FROM codity.claim(%s, 'webhooks', 3)", [worker]
    ).fetchall()
    conn.execute(
        "SELECT * FROM codity.start_many(%s::bigint[], %s::integer[])",
        [[c[0] for c in claimed], [c[1] for c in claimed]],
    )
    outcomes = (
        [("complete", None)] * 12
        + [("fail", "SimulatedOutage: SMTP 451 try again later")] * 6
        + [("fail permanently", "NonRetryable: mailbox does not exist")] * 2
        + [("fail", "HTTPError: 503 Service Unavailable")] * 3
    )
    for (job_id, fence), (outcome, error) in zip(claimed, outcomes, strict=True):
        if outcome == "complete":
            conn.execute(
                "SELECT * FROM codity.complete(%s, %s, %s)", [job_id, fence, Jsonb({"ok": True})]
            )
        else:
            conn.execute(
                "SELECT * FROM codity.fail(%s, %s, %s, %s)",
                [job_id, fence, error, outcome == "fail"],
            )
    conn.execute("SELECT codity.deregister_worker(%s)", [worker])
    log.info("demo history: %d jobs run through the protocol", len(claimed))


def seed_demo(url: str) -> dict[str, int]:
    """Reset the default project and seed the demo data set; returns counts per job status."""
    with psycopg.connect(conninfo(url), autocommit=True) as conn:
        _reset(conn)
        _operator(conn)
        _create_queues(conn)
        _history(conn)
        # Work left for real workers: due now, and one report far in the future.
        emails = [{"to": f"new{i}@example.com"} for i in range(30)]
        _enqueue(conn, "emails", _jobs("emails.send", emails))
        reports = [{"report": f"monthly-{i}"} for i in range(5)]
        _enqueue(conn, "reports", _jobs("reports.generate", reports))
        later = [{"report": "yearly"}]
        _enqueue(conn, "reports", _jobs("reports.generate", later, run_at="2100-01-01T00:00:00Z"))
        hooks = [{"url": f"https://hooks.example/n{i}"} for i in range(20)]
        _enqueue(conn, "webhooks", _jobs("webhooks.deliver", hooks))
        conn.execute("SELECT * FROM codity.resume_all()")
        rows = conn.execute(
            "SELECT status::text, count(*) FROM codity.jobs GROUP BY 1 ORDER BY 1"
        ).fetchall()
    return {status: count for status, count in rows}
