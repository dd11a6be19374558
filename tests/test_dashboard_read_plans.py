"""The dashboard's reads stay in their indexes under row-level security (migration 0042).

Found with ``codity bench-dashboard`` at 1,000,000 jobs: the overview, the queues page and
the jobs list took 3-3.5 s, against 20-75 ms when last measured. The causes, each pinned
here by the plan PostgreSQL makes as ``codity_app`` with a tenant set:

- the tenant check ran ``codity.current_project_id()`` as a function call per row (a SQL
  function with a SET clause is never inlined). Break it: put ``SET search_path`` back on
  the function, and the policy's filter names the function again;
- the jobs list's ``waiting`` tab had no index: its count read every job of every queue.
  Break it: drop ``jobs_waiting_idx``, and the count reads ``jobs_pkey``;
- a count of finished jobs read the heap for every row, to check the project. Break it:
  build ``jobs_completed_idx`` without ``INCLUDE (project_id)``, and the plan is no
  longer an index-only scan;
- the overview's "last claim" took the max of ``claimed_at`` over every execution of the
  queue. Break it: put that max back, and the plan reads ``job_executions_pkey``;
- the dead-letter list's count by shares (migration 0043) read the heap for every letter of
  each queue. Break it: build ``dead_letters_queue_idx`` without ``INCLUDE (project_id)``;
- the jobs list picked each queue's page as whole rows, which on a Citus shard let the
  planner walk ``jobs_id_idx`` instead (85 ms for the completed tab). Break it: select
  ``j.*`` in the per-queue subquery again, and the pick is no longer index-only.

Plans, not timings: with sequential scans off, a plan that cannot use the right index
shows which one it used instead, on a database of a few rows.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from codity.web.endpoints.dead_letters import _SHARES_COUNT
from codity.web.endpoints.jobs import _LIST, match_query
from codity.web.endpoints.overview import _PER_QUEUE
from tests.sqlapi import create_queue

STATES = ("queued", "completed", "failed", "dead_letter", "cancelled", "waiting")


def _as_app(conn: psycopg.Connection) -> None:
    conn.execute("SET enable_seqscan = off")
    conn.execute("SET enable_bitmapscan = off")
    conn.execute("SELECT set_config('codity.project_id', "
                 "(SELECT id::text FROM codity.projects WHERE is_default), false)")  # fmt: skip
    conn.execute("SET role codity_app")


def _plan(conn: psycopg.Connection, query: str, params: Any = None) -> str:
    rows = conn.execute(f"EXPLAIN (COSTS OFF) {query}", params).fetchall()
    return "\n".join(str(r[0]) for r in rows)


@pytest.fixture
def queue_id(conn: psycopg.Connection) -> int:
    return create_queue(conn, "planned")


def test_the_tenant_check_is_inlined_into_the_policy(
    conn: psycopg.Connection, queue_id: int
) -> None:
    _as_app(conn)
    plan = _plan(conn, "SELECT 1 FROM codity.jobs j WHERE j.queue_id = %s", [queue_id])
    assert "current_setting('codity.project_id'" in plan, plan
    assert "current_project_id()" not in plan, plan


@pytest.mark.parametrize("state", STATES)
def test_each_state_tab_counts_from_an_index_of_its_own(
    conn: psycopg.Connection, queue_id: int, state: str
) -> None:
    conn.execute("VACUUM codity.jobs")  # all-visible, as autovacuum leaves settled pages
    _as_app(conn)
    plan = _plan(
        conn,
        "SELECT count(*) FROM (SELECT 1 FROM codity.jobs j"
        " WHERE j.queue_id = %s AND j.status = %s::codity.job_status LIMIT 10001) c",
        [queue_id, state],
    )
    index = "jobs_claim_idx" if state == "queued" else f"jobs_{state}_idx"
    assert f"Index Only Scan using {index} on jobs" in plan, plan


def test_the_overview_finds_the_last_claim_without_reading_every_execution(
    conn: psycopg.Connection, queue_id: int
) -> None:
    _as_app(conn)
    project = conn.execute("SELECT codity.current_project_id()").fetchone()
    assert project is not None
    plan = _plan(conn, _PER_QUEUE, {"project_id": project[0], "dead": 60, "sampled": None})
    assert "job_executions_finished_idx" in plan, plan
    assert "job_executions_pkey" not in plan, plan


def test_the_dead_letter_count_by_shares_reads_only_the_index(
    conn: psycopg.Connection, queue_id: int
) -> None:
    project = conn.execute("SELECT id FROM codity.projects WHERE is_default").fetchone()
    assert project is not None
    conn.execute("VACUUM codity.dead_letters")
    _as_app(conn)
    unfiltered = dict.fromkeys(("queue", "task", "dead_after", "dead_before", "replayed"))
    plan = _plan(conn, _SHARES_COUNT, {**unfiltered, "project_id": project[0], "share": 2_501})
    assert "Index Only Scan using dead_letters_queue_idx on dead_letters d" in plan, plan


def test_the_jobs_list_picks_each_queues_page_from_the_states_index(
    conn: psycopg.Connection, queue_id: int
) -> None:
    project = conn.execute("SELECT id FROM codity.projects WHERE is_default").fetchone()
    assert project is not None
    conn.execute("VACUUM codity.jobs")
    _as_app(conn)
    unfiltered = dict.fromkeys(
        ("queue", "task", "id", "worker_id", "payload", "created_after", "created_before",
         "finished_after", "finished_before", "cursor")
    )  # fmt: skip
    params = {**unfiltered, "project_id": project[0], "status": ["completed"], "fetch": 51}
    plan = _plan(conn, match_query(_LIST, params), params)
    assert "Index Only Scan Backward using jobs_completed_idx on jobs j" in plan, plan
