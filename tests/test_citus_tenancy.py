"""Tenant isolation (row-level security) on a real Citus 14 cluster, as each role.

Two tenants, A and B, each with queues on both worker nodes and rows in every
project-keyed table: jobs queued, completed and dead-lettered, their executions, a fence
rejection, a schedule, a worker, an API key, a member. Each role reads every table and view
with no WHERE at all, through the coordinator:

- ``codity_app`` as the web app sets it up (codity.web.database: its pool, its transaction,
  its ``set_tenant``): exactly the tenant's rows, in every relation — and since the world has
  rows of each tenant everywhere, an empty answer is a failure (on a cluster, a tenant
  setting that never reaches the shards hides every row with no error);
- ``codity_app`` with the tenant set by ``SET LOCAL`` (DESIGN.md's rule 8, which Citus
  propagates to the nodes): the same;
- ``codity_readonly`` (a login granted it): every row of both tenants on both nodes;
- ``codity_worker`` (a login granted it): refused on every table and view of schema codity.

Break it: ``ALTER TABLE codity.jobs DISABLE ROW LEVEL SECURITY`` (propagated to every shard)
makes tenant A's reads count B's jobs too; ``citus.propagate_set_commands`` left unset on the
database makes the ``SET LOCAL`` reads empty (the shards see no tenant).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg.types.json import Jsonb

from codity.web.access import Role
from codity.web.database import open_pool, set_tenant, transaction
from tests.citus import CitusCluster
from tests.sqlapi import create_queue, one
from tests.webapp import Tenant, api_key, make_tenant

pytestmark = pytest.mark.citus

Conn = psycopg.Connection[Any]

# Relations keyed by project (their rows carry project_id), by org, and the read views.
PROJECT_TABLES = (
    "queues",
    "jobs",
    "job_executions",
    "dead_letters",
    "queue_totals",
    "scheduled_jobs",
    "workers",
    "api_keys",
    "fence_rejections",
)
ORG_TABLES = ("projects", "memberships")
VIEWS = (
    "queue_overview",
    "worker_overview",
    "schedule_overview",
    "job_overview",
    "execution_overview",
    "dead_letter_overview",
    "fence_rejection_overview",
)
RELATIONS = PROJECT_TABLES + ORG_TABLES + VIEWS
# The job tables distributed by queue: the rows that live on the worker nodes.
ON_THE_NODES = ("jobs", "job_executions", "dead_letters", "queue_totals")


def _as(url: str, login: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, f"{login}@{parts.hostname}:{parts.port}", parts.path, "", ""))


def _populate(cluster: CitusCluster, conn: Conn, tenant: Tenant) -> None:
    """Queues on both worker nodes, each with a queued, a completed and a dead-lettered job
    and their executions; a stale completion (a fence rejection); a schedule, a worker, an
    API key and an owner."""
    p = tenant.project_id
    nodes: set[int] = set()
    queues: list[str] = []
    for n in range(20):
        name = f"{tenant.slug}-q{n}"
        queue = create_queue(conn, name, project_id=p, max_attempts=1)
        port = cluster.node_port_of(conn.info.dbname, "codity.jobs", queue)
        if port not in nodes:
            nodes.add(port)
            queues.append(name)
        if len(nodes) == len(cluster.workers):
            break
    assert len(nodes) == len(cluster.workers), f"{tenant.slug}: queues on {nodes} only"
    worker = one(conn, "SELECT codity.register_worker('w', %s, 5, 'h', 1, %s)", [queues, p])
    for name in queues:
        conn.execute(
            "SELECT * FROM codity.enqueue_many(%s, %s, p_project_id => %s)",
            [name, Jsonb([{"task": "t"}] * 3), p],
        )
        claimed = conn.execute(
            "SELECT job_id, fence FROM codity.claim(%s, %s, 2)", [worker, name]
        ).fetchall()
        assert len(claimed) == 2
        (done, done_fence), (doomed, doomed_fence) = claimed
        conn.execute("SELECT * FROM codity.start(%s, %s)", [done, done_fence])
        conn.execute("SELECT * FROM codity.complete(%s, %s)", [done, done_fence])
        conn.execute("SELECT * FROM codity.start(%s, %s)", [doomed, doomed_fence])
        conn.execute("SELECT * FROM codity.fail(%s, %s, 'boom')", [doomed, doomed_fence])
        conn.execute("SELECT * FROM codity.complete(%s, %s)", [doomed, doomed_fence])  # stale
    conn.execute(
        "SELECT * FROM codity.create_schedule('nightly', %s, '0 2 * * *', 't', '{}', 'UTC', 0, %s)",
        [queues[0], p],
    )
    api_key(conn, tenant, Role.VIEWER)
    user = one(
        conn,
        "INSERT INTO codity.users (email, password_hash) VALUES (%s, 'x') RETURNING id",
        [f"owner@{tenant.slug}.test"],
    )
    conn.execute(
        "INSERT INTO codity.memberships (org_id, user_id, role) VALUES (%s, %s, 'owner')",
        [tenant.org_id, user],
    )


def _expected(conn: Conn, tenant: Tenant | None) -> dict[str, int]:
    """Each relation's row count for ``tenant`` (for everyone with None), read as the
    superuser with an explicit WHERE."""
    counts: dict[str, int] = {}
    for relation in RELATIONS:
        if tenant is None:
            where, value = "%s::bigint IS NULL", None
        elif relation in ORG_TABLES:
            where, value = "org_id = %s", tenant.org_id
        else:
            where, value = "project_id = %s", tenant.project_id
        counts[relation] = int(
            one(conn, f"SELECT count(*) FROM codity.{relation} WHERE {where}", [value])
        )
    return counts


@pytest.fixture
def world(citus_cluster: CitusCluster, citus_db_url: str) -> Iterator[tuple[str, Tenant, Tenant]]:
    """A distributed database holding tenants A and B."""
    with psycopg.connect(citus_db_url, autocommit=True) as conn:
        a, b = make_tenant(conn, "tenant-a"), make_tenant(conn, "tenant-b")
        _populate(citus_cluster, conn, a)
        _populate(citus_cluster, conn, b)
        for tenant in (a, b):
            counts = _expected(conn, tenant)
            empty = [r for r, n in counts.items() if n == 0]
            assert empty == [], f"{tenant.slug} has no rows in {empty}: nothing would be proven"
    yield citus_db_url, a, b


async def _web_app_counts(url: str, tenant: Tenant) -> dict[str, int]:
    pool = await open_pool(url, min_size=1, max_size=1)
    try:
        async with transaction(pool) as conn:
            await set_tenant(conn, org_id=tenant.org_id, project_id=tenant.project_id)
            counts: dict[str, int] = {}
            for relation in RELATIONS:
                cur = await conn.execute(f"SELECT count(*) AS n FROM codity.{relation}")
                row = await cur.fetchone()
                assert row is not None
                counts[relation] = int(row["n"])
            return counts
    finally:
        await pool.close()


def _set_local_counts(url: str, tenant: Tenant) -> dict[str, int]:
    with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
        conn.execute("SET LOCAL ROLE codity_app")
        conn.execute(f"SET LOCAL codity.org_id = '{tenant.org_id}'")
        conn.execute(f"SET LOCAL codity.project_id = '{tenant.project_id}'")
        return {r: int(one(conn, f"SELECT count(*) FROM codity.{r}")) for r in RELATIONS}


def _compare(seen: dict[str, int], expected: dict[str, int]) -> dict[str, str]:
    """Relations where a role saw other than expected: 'saw 0 of 4' (hidden rows: the
    failure a cluster shows with no error) or 'saw 9 of 4' (another tenant's rows)."""
    return {
        relation: f"saw {seen[relation]} of {count}"
        for relation, count in expected.items()
        if seen[relation] != count
    }


def test_the_web_app_sees_exactly_its_tenants_rows_on_every_node(
    world: tuple[str, Tenant, Tenant],
) -> None:
    url, a, b = world
    with psycopg.connect(url, autocommit=True) as conn:
        expected = {t.slug: _expected(conn, t) for t in (a, b)}
    seen = {t.slug: asyncio.run(_web_app_counts(url, t)) for t in (a, b)}
    assert {t: _compare(seen[t], expected[t]) for t in seen} == {a.slug: {}, b.slug: {}}


def test_the_app_role_with_a_set_local_tenant_sees_exactly_its_rows_on_every_node(
    world: tuple[str, Tenant, Tenant],
) -> None:
    url, a, b = world
    with psycopg.connect(url, autocommit=True) as conn:
        expected = {t.slug: _expected(conn, t) for t in (a, b)}
    seen = {t.slug: _set_local_counts(url, t) for t in (a, b)}
    assert {t: _compare(seen[t], expected[t]) for t in seen} == {a.slug: {}, b.slug: {}}
    # Each tenant's job rows really are on both worker nodes, and both tenants' are apart.
    assert all(expected[t]["jobs"] == 3 * 2 for t in expected)


def test_breaking_rls_on_the_distributed_jobs_is_seen_by_the_tenancy_check(
    world: tuple[str, Tenant, Tenant],
) -> None:
    """Break it first: with row-level security off on codity.jobs (every shard), tenant A's
    read counts B's jobs too, and the comparison names the table."""
    url, a, _ = world
    with psycopg.connect(url, autocommit=True) as conn:
        expected = _expected(conn, a)
        conn.execute("ALTER TABLE codity.jobs DISABLE ROW LEVEL SECURITY")
    broken = _compare(_set_local_counts(url, a), expected)
    assert "jobs" in broken and broken["jobs"] == "saw 12 of 6", broken


def _login(conn: Conn, name: str, role: str) -> None:
    exists = one(conn, "SELECT count(*) FROM pg_catalog.pg_roles WHERE rolname = %s", [name])
    if not exists:
        conn.execute(f"CREATE ROLE {name} LOGIN IN ROLE {role}")


def test_the_readonly_role_sees_every_row_of_both_tenants_on_every_node(
    world: tuple[str, Tenant, Tenant],
) -> None:
    """The installation-wide read role of DBAs and monitoring: every row of the job tables,
    the queues, workers, schedules, rejections and views of both tenants; no access to the
    tenancy and credential tables (api_keys, projects, memberships)."""
    url, _, _ = world
    with psycopg.connect(url, autocommit=True) as conn:
        _login(conn, "codity_citus_readonly_login", "codity_readonly")
        everyone = _expected(conn, None)
    refused = []
    seen: dict[str, int] = {}
    with psycopg.connect(_as(url, "codity_citus_readonly_login"), autocommit=True) as login:
        assert one(login, "SELECT current_user") == "codity_citus_readonly_login"
        for relation in RELATIONS:
            try:
                seen[relation] = int(one(login, f"SELECT count(*) FROM codity.{relation}"))
            except psycopg.errors.InsufficientPrivilege:
                refused.append(relation)
    assert refused == ["api_keys", "projects", "memberships"]
    assert _compare(seen, {r: n for r, n in everyone.items() if r in seen}) == {}
    assert all(everyone[r] > 0 for r in ON_THE_NODES)


def test_the_worker_role_reads_no_table_or_view_on_any_node(
    world: tuple[str, Tenant, Tenant],
) -> None:
    url, _, _ = world
    with psycopg.connect(url, autocommit=True) as conn:
        _login(conn, "codity_citus_worker_login", "codity_worker")
        relations = [
            str(r[0])
            for r in conn.execute(
                "SELECT c.relname FROM pg_catalog.pg_class c"
                " WHERE c.relnamespace = 'codity'::regnamespace AND c.relkind IN ('r', 'p', 'v')"
                " AND c.relname NOT LIKE '%\\_1_____'"  # no shard of a job table
                " ORDER BY 1"
            ).fetchall()
        ]
    assert set(RELATIONS) <= set(relations)
    readable = []
    with psycopg.connect(_as(url, "codity_citus_worker_login"), autocommit=True) as login:
        for relation in relations:
            try:
                login.execute(f"SELECT count(*) FROM codity.{relation}")
            except psycopg.errors.InsufficientPrivilege:
                continue
            readable.append(relation)
    assert readable == []
