"""The SQL API as the tests call it: the small helpers several test files used to write for
themselves, in one place.

Plain calls on a psycopg connection (autocommit, the rolled-back ``tx``, or a login's), values
always as parameters. Nothing here hides what a test proves: a helper sets the scene
(a queue, a project, a held job) or reads one row; the call under test stays in the test.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

__all__ = [
    "NO_BACKOFF",
    "Conn",
    "create_queue",
    "create_queue_call",
    "enqueue_many_call",
    "hold_one_job",
    "make_project",
    "one",
    "row",
    "table_snapshot",
]

Conn = psycopg.Connection[Any]

NO_BACKOFF: dict[str, Any] = {"backoff": "fixed", "base_delay_ms": 0, "max_delay_ms": 0}
"""A queue policy whose retries are due at once: for tests that run a retry without moving time."""


def row(conn: Conn, query: str, params: Any = None) -> tuple[Any, ...]:
    """The one row a query must return."""
    found = conn.execute(query, params).fetchone()
    assert found is not None, query
    return tuple(found)


def one(conn: Conn, query: str, params: Any = None) -> Any:
    """The first column of the one row a query must return."""
    return row(conn, query, params)[0]


def create_queue_call(name: str, **policy: Any) -> tuple[str, list[Any]]:
    """``codity.create_queue`` with ``policy`` as named arguments (``max_attempts=2`` is
    ``p_max_attempts => 2``): the query and its parameters, for a connection or a Probe."""
    args = "".join(f", p_{key} => %s" for key in policy)
    return f"SELECT queue_id FROM codity.create_queue(%s{args})", [name, *policy.values()]


def create_queue(conn: Conn, name: str, **policy: Any) -> int:
    """Create (or change) a queue; returns its id."""
    return int(one(conn, *create_queue_call(name, **policy)))


def enqueue_many_call(queue: str, jobs: list[dict[str, Any]]) -> tuple[str, list[Any]]:
    """``codity.enqueue_many`` of ``jobs`` (``{"task": ..., "payload": ...}``), ids in order."""
    return (
        "SELECT job_id FROM codity.enqueue_many(%s, %s) ORDER BY job_position",
        [queue, Jsonb(jobs)],
    )


def make_project(conn: Conn, slug: str) -> tuple[int, int]:
    """A new org ``slug`` with its project ``main``, inserted as the database's owner:
    (org id, project id)."""
    org = int(
        one(conn, "INSERT INTO codity.orgs (slug, name) VALUES (%s, %s) RETURNING id", [slug, slug])
    )
    project = one(
        conn,
        "INSERT INTO codity.projects (org_id, slug, name) VALUES (%s, 'main', 'Main') RETURNING id",
        [org],
    )
    return org, int(project)


def hold_one_job(conn: Conn) -> tuple[int, int, int]:
    """A worker and one job it has claimed: (worker, job, fence)."""
    conn.execute("SELECT codity.create_queue('emails', p_max_attempts => 3)")
    (worker,) = row(conn, "SELECT codity.register_worker('w', ARRAY['emails'])")
    conn.execute("SELECT codity.enqueue('emails', 'emails.send')")
    job, fence = row(conn, "SELECT job_id, fence FROM codity.claim(%s, 'emails', 1)", [worker])
    return int(worker), int(job), int(fence)


def table_snapshot(conn: Conn) -> dict[str, tuple[int, str]]:
    """Row count and a digest of the contents of every table in schema codity."""
    tables = [
        found[0]
        for found in conn.execute(
            "SELECT c.relname FROM pg_catalog.pg_class c"
            " WHERE c.relnamespace = 'codity'::regnamespace AND c.relkind IN ('r', 'p')"
            " ORDER BY c.relname"
        )
    ]
    snapshot: dict[str, tuple[int, str]] = {}
    for table in tables:
        query = sql.SQL(
            "SELECT count(*), md5(coalesce(string_agg(t::text, ',' ORDER BY t::text), ''))"
            " FROM codity.{} t"
        ).format(sql.Identifier(table))
        counted = conn.execute(query).fetchone()
        assert counted is not None
        snapshot[table] = (int(counted[0]), str(counted[1]))
    return snapshot
