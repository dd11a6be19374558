"""The generated docs are current, and the claim's plan is what docs/EXPLAIN.md says.

docs/SQL_API.md must equal what py/sql_reference.py renders from a freshly migrated
database, docs/DATABASE.md's roles table what the grants say, and docs/API_CONTRACT.md's
route table what ALL_ROUTES renders. The claim's
selection must plan as Limit -> LockRows -> Index Scan using jobs_claim_idx with no Sort
node, and the same check must fail once the index is gone; with jobs waiting on parents in
its queue it must plan the same and read no more (issue 27), and that check must fail once
'waiting' is in the claim index's predicate.
"""

from __future__ import annotations

import difflib
import re

import psycopg
import pytest

from codity.explain import (
    claim_plan,
    claim_plan_problems,
    claim_statement_plans,
    explain_path,
    load_jobs,
)
from codity.explain_waiting import claim_reads, load_waiting, waiting_problems
from codity.roles_reference import database_doc_path, render_roles
from codity.sql_reference import reference_path, render_reference
from codity.web.reference import api_contract_path, render_route_table
from codity.web.routes import ALL_ROUTES

JOBS = 20_000
WAITING = 20_000


def test_sql_reference_matches_the_catalogue(shared_db_url: str) -> None:
    expected = render_reference(shared_db_url)  # reads the catalogue only
    path = reference_path()
    actual = path.read_text(encoding="utf-8") if path.exists() else ""
    if actual != expected:
        diff = difflib.unified_diff(
            actual.splitlines(), expected.splitlines(), "docs/SQL_API.md", "catalogue", lineterm=""
        )
        pytest.fail(
            "docs/SQL_API.md is stale: run ./codity sql-reference\n" + "\n".join(list(diff)[:60])
        )


def test_database_roles_table_matches_the_grants(tx: psycopg.Connection) -> None:
    assert render_roles(tx) in database_doc_path().read_text(encoding="utf-8"), (
        "docs/DATABASE.md's roles table is stale: run ./codity sql-reference"
    )


def test_api_contract_route_table_matches_the_route_list() -> None:
    text = api_contract_path().read_text(encoding="utf-8")
    assert render_route_table(ALL_ROUTES) in text, (
        "docs/API_CONTRACT.md's route table is stale: run ./codity api-reference"
    )


def _loaded(conn: psycopg.Connection) -> int:
    queue_id = load_jobs(conn, JOBS)[0]
    conn.execute("ANALYZE codity.jobs")
    return queue_id


def test_claim_plan_is_an_index_scan_of_the_claim_index_without_sort(
    conn: psycopg.Connection,
) -> None:
    queue_id = _loaded(conn)
    plan = claim_plan(conn, queue_id)
    assert claim_plan_problems(plan) == [], plan


@pytest.mark.parametrize("jobs", [3, 200])
def test_the_generic_claim_plan_made_on_a_small_table_still_scans_the_claim_index(
    conn: psycopg.Connection, jobs: int
) -> None:
    """claim_in_queue plans once per session (force_generic_plan), for the table as it is
    then. Planned on a table of a few rows, the pick would seq-scan and sort, and keep doing
    so as a burst of jobs arrived, until the next ANALYZE; the function's enable_sort = off
    keeps it on the claim index at any size (claim_plan applies the function's settings)."""
    queue_id = load_jobs(conn, jobs)[0]
    conn.execute("ANALYZE codity.jobs")
    assert claim_plan_problems(claim_plan(conn, queue_id)) == []


@pytest.mark.parametrize("jobs", [3, 200])
def test_a_claim_planned_on_a_small_table_scans_indexes_only(
    db_url: str, conn: psycopg.Connection, jobs: int
) -> None:
    """Both statements as the function runs them (auto_explain, the session's first claim, so
    the generic plans are made on the small table): no Seq Scan of jobs, the pick on the
    claim index, and never compiled. Without the function's enable_seqscan = off the UPDATE
    seq-scans; without its jit = off, PostgreSQL 15 compiles the claim (CI runs both)."""
    load_jobs(conn, jobs, queues=1)
    conn.execute("ANALYZE codity.jobs")
    with psycopg.connect(db_url, autocommit=True) as session:
        plans = claim_statement_plans(session, "explain-0")
    assert plans is not None, "auto_explain could not be loaded"
    assert "Seq Scan on jobs" not in plans, plans
    assert "Index Scan using jobs_claim_idx" in plans, plans
    assert "Update on jobs" in plans, plans
    # The UPDATE reads the rows the pick locked by ctid, never an index range
    # (DESIGN_DECISIONS 58).
    assert "Tid Scan on jobs" in plans, plans
    # Before PostgreSQL 18 a disabled sort is priced at 10^10, past jit_above_cost: a server
    # built with LLVM would compile every claim (the function's SET jit = off).
    assert "JIT:" not in plans, plans


def test_claim_plan_check_fails_without_the_claim_index(conn: psycopg.Connection) -> None:
    queue_id = _loaded(conn)
    conn.execute("DROP INDEX codity.jobs_claim_idx")
    problems = claim_plan_problems(claim_plan(conn, queue_id))
    sorted_or_other_index = [p for p in problems if p.endswith("Sort node") or "uses" in p]
    assert sorted_or_other_index, problems


def _waiting_problems(conn: psycopg.Connection, queue_id: int) -> list[str]:
    """The claim's reads before and after WAITING workflow nodes join the queue (priority
    1000, ahead of every queued job), each after an ANALYZE."""
    before = claim_reads(conn, queue_id)
    load_waiting(conn, queue_id, WAITING)
    conn.execute("ANALYZE codity.jobs")
    return waiting_problems(before, claim_reads(conn, queue_id))


def test_jobs_waiting_on_parents_leave_the_claim_plan_and_its_reads_as_they_were(
    conn: psycopg.Connection,
) -> None:
    """Issue 27's zero cost for plain jobs, as docs/EXPLAIN.md shows it with 1,000,000
    waiting: the same Index Scan of jobs_claim_idx, no more index entries or buffers read."""
    queue_id = _loaded(conn)
    assert _waiting_problems(conn, queue_id) == []
    assert claim_plan_problems(claim_plan(conn, queue_id)) == []


def test_waiting_check_fails_with_waiting_in_the_claim_index(conn: psycopg.Connection) -> None:
    """Break it: with 'waiting' in its predicate, the claim index holds the waiting nodes
    ahead of the queued jobs, and the claim reads its way through them (same plan, same
    index name: only the entries and buffers give it away)."""
    queue_id = _loaded(conn)
    conn.execute("DROP INDEX codity.jobs_claim_idx")
    conn.execute(
        "CREATE INDEX jobs_claim_idx ON codity.jobs (queue_id, priority DESC, run_at, id)"
        " WHERE status IN ('queued', 'waiting')"
    )
    problems = _waiting_problems(conn, queue_id)
    assert any(p.startswith("index entries read") for p in problems), problems
    assert any(p.startswith("buffers read") for p in problems), problems


def test_claim_plan_leaves_no_row_locked(conn: psycopg.Connection, db_url: str) -> None:
    queue_id = _loaded(conn)
    claim_plan(conn, queue_id)
    with psycopg.connect(db_url) as other:
        row = other.execute(
            "SELECT count(*) FROM (SELECT FROM codity.jobs WHERE queue_id = %s"
            " AND status = 'queued' FOR UPDATE NOWAIT) AS locked",
            [queue_id],
        ).fetchone()
    assert row is not None and row[0] == JOBS // 4


def test_explain_doc_shows_the_claim_index_plan_without_sort() -> None:
    path = explain_path()
    assert path.exists(), "docs/EXPLAIN.md is missing: run ./codity explain"
    text = path.read_text(encoding="utf-8")
    found = re.search(r"## The plan with the full claim index\n.*?```text\n(.*?)```", text, re.S)
    assert found, "docs/EXPLAIN.md has no text plan under its full-index heading"
    plan = found[1]
    assert "Index Scan using jobs_claim_idx" in plan
    assert "Sort" not in plan


def test_explain_doc_shows_the_claim_unchanged_by_a_million_waiting_jobs() -> None:
    text = explain_path().read_text(encoding="utf-8")
    found = re.search(r"## With ([\d,]+) jobs waiting on parents\n(.*?)\n## ", text, re.S)
    assert found, "docs/EXPLAIN.md has no section on waiting jobs: run ./codity explain"
    assert int(found[1].replace(",", "")) >= 1_000_000, found[1]
    assert "the claim runs the same plan" in found[2]
    assert "Index Scan using jobs_claim_idx" in found[2]
