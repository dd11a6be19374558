"""The database's own wall between tenants: row-level security keyed on the project.

As codity_app with tenant A's settings, a query with no WHERE at all sees A's rows and
none of B's, in every project-keyed table and every view (the views run with the caller's
rights, security_invoker). Break it first: with RLS disabled on a table, or a view running
with its owner's rights again, the same check sees B's rows (the detector below reports it).
The two tenants are built once; each test runs in a transaction rolled back at its end.
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from psycopg import errors

from codity.web.access import Role
from tests.conftest import cloned, rolled_back
from tests.webapp import Tenant, api_key, make_tenant

PROJECT_TABLES = (
    "queues",
    "jobs",
    "job_executions",
    "dead_letters",
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


def _populate(conn: psycopg.Connection, tenant: Tenant) -> None:
    p = tenant.project_id
    conn.execute("SELECT * FROM codity.create_queue('emails', %s, 1)", [p])
    conn.execute("SELECT * FROM codity.enqueue('emails', 't', '{}', p_project_id => %s)", [p])
    conn.execute("SELECT * FROM codity.enqueue('emails', 'doomed', '{}', p_project_id => %s)", [p])
    worker = conn.execute(
        "SELECT codity.register_worker('w', ARRAY['emails'], 5, 'h', 1, %s)", [p]
    ).fetchone()
    assert worker is not None
    claimed = conn.execute(
        "SELECT job_id, fence FROM codity.claim(%s, 'emails', 1)", [worker[0]]
    ).fetchall()
    for job_id, fence in claimed:
        conn.execute("SELECT * FROM codity.start(%s, %s)", [job_id, fence])
        conn.execute("SELECT * FROM codity.fail(%s, %s, 'boom')", [job_id, fence])
        # A stale call, so fence_rejections has a row of this tenant.
        conn.execute("SELECT * FROM codity.complete(%s, %s)", [job_id, fence])
    conn.execute(
        "SELECT * FROM codity.create_schedule('nightly', 'emails', '0 2 * * *', 't', '{}',"
        " 'UTC', 0, %s)",
        [p],
    )
    api_key(conn, tenant, Role.VIEWER)
    conn.execute(
        "INSERT INTO codity.users (email, password_hash) VALUES (%s, 'x') RETURNING id",
        [f"owner@{tenant.slug}.test"],
    )
    conn.execute(
        "INSERT INTO codity.memberships (org_id, user_id, role)"
        " SELECT %s, id, 'owner' FROM codity.users WHERE email = %s",
        [tenant.org_id, f"owner@{tenant.slug}.test"],
    )


def _two_tenants(conn: psycopg.Connection) -> tuple[Tenant, Tenant]:
    a, b = make_tenant(conn), make_tenant(conn)
    _populate(conn, a)
    _populate(conn, b)
    return a, b


@pytest.fixture(scope="module")
def world(pg_server_url: str, template_url: str) -> Iterator[tuple[str, tuple[Tenant, Tenant]]]:
    """Tenants A and B, populated once for the module in a database of its own."""
    with cloned(pg_server_url) as url:
        with psycopg.connect(url, autocommit=True) as conn:
            tenants = _two_tenants(conn)
        yield url, tenants


@pytest.fixture
def tx(world: tuple[str, tuple[Tenant, Tenant]]) -> Iterator[psycopg.Connection]:
    """Here, the rolled-back transaction runs on the module's two-tenant database: the tests
    that break RLS (ALTER TABLE, ALTER VIEW) have it undone before the next one starts."""
    with rolled_back(world[0]) as connection:
        yield connection


@pytest.fixture
def two_tenants(world: tuple[str, tuple[Tenant, Tenant]]) -> tuple[Tenant, Tenant]:
    return world[1]


def leaks(conn: psycopg.Connection, viewer: Tenant, other: Tenant) -> list[str]:
    """Tables where codity_app, acting for ``viewer``, sees a row it should not, or misses one."""
    expected: dict[str, int] = {}
    for table in PROJECT_TABLES:
        column = (
            "project_id" if table in ("queues", "scheduled_jobs", "workers", "api_keys") else None
        )
        if column:
            sql = f"SELECT count(*) FROM codity.{table} WHERE project_id = %s"
        else:
            sql = (
                f"SELECT count(*) FROM codity.{table} t JOIN codity.queues q ON q.id = t.queue_id"
                " WHERE q.project_id = %s"
            )
        row = conn.execute(sql, [viewer.project_id]).fetchone()
        assert row is not None
        expected[table] = row[0]
    for table in ORG_TABLES:
        row = conn.execute(
            f"SELECT count(*) FROM codity.{table} WHERE org_id = %s", [viewer.org_id]
        ).fetchone()
        assert row is not None
        expected[table] = row[0]
    for view in VIEWS:
        row = conn.execute(
            f"SELECT count(*) FROM codity.{view} WHERE project_id = %s", [viewer.project_id]
        ).fetchone()
        assert row is not None
        expected[view] = row[0]

    found = []
    # Rolled back, not released: in a test's own transaction the settings (SET LOCAL) of a
    # released savepoint would outlive it.
    with conn.transaction(force_rollback=True):
        conn.execute(
            "SELECT set_config('role', 'codity_app', true),"
            " set_config('codity.org_id', %s, true), set_config('codity.project_id', %s, true)",
            [str(viewer.org_id), str(viewer.project_id)],
        )
        for table, count in expected.items():
            row = conn.execute(f"SELECT count(*) FROM codity.{table}").fetchone()
            if row is None or row[0] != count:
                found.append(table)
    return found


def test_the_app_role_sees_only_its_tenants_rows_without_any_where(
    tx: psycopg.Connection, two_tenants: tuple[Tenant, Tenant]
) -> None:
    a, b = two_tenants
    for table in PROJECT_TABLES + ORG_TABLES + VIEWS:
        row = tx.execute(f"SELECT count(*) FROM codity.{table}").fetchone()
        assert row is not None and row[0] > 0, f"{table} is empty: the check would prove nothing"
    assert leaks(tx, a, b) == []
    assert leaks(tx, b, a) == []


def test_no_tenant_set_means_no_rows(
    tx: psycopg.Connection, two_tenants: tuple[Tenant, Tenant]
) -> None:
    with tx.transaction(force_rollback=True):
        tx.execute("SELECT set_config('role', 'codity_app', true)")
        for table in PROJECT_TABLES + ORG_TABLES + VIEWS:
            assert tx.execute(f"SELECT count(*) FROM codity.{table}").fetchone() == (0,), table


@pytest.mark.parametrize("table", PROJECT_TABLES + ORG_TABLES)
def test_disabling_rls_on_a_table_is_detected(
    tx: psycopg.Connection, two_tenants: tuple[Tenant, Tenant], table: str
) -> None:
    """Break it first: without the policy, tenant A's role reads B's rows."""
    a, b = two_tenants
    tx.execute(f"ALTER TABLE codity.{table} DISABLE ROW LEVEL SECURITY")
    assert table in leaks(tx, a, b)


@pytest.mark.parametrize("view", VIEWS)
def test_a_view_running_with_its_owners_rights_is_detected(
    tx: psycopg.Connection, two_tenants: tuple[Tenant, Tenant], view: str
) -> None:
    """Break it first: with its owner's rights a view bypasses RLS (the bug of migration 2)."""
    a, b = two_tenants
    tx.execute(f"ALTER VIEW codity.{view} SET (security_invoker = false)")
    assert view in leaks(tx, a, b)


def test_the_app_role_cannot_turn_rls_off_or_write_job_state(
    tx: psycopg.Connection, two_tenants: tuple[Tenant, Tenant]
) -> None:
    a, _ = two_tenants
    tx.execute("SET ROLE codity_app")
    tx.execute("SELECT set_config('codity.project_id', %s, false)", [str(a.project_id)])
    with pytest.raises(errors.InsufficientPrivilege), tx.transaction():
        tx.execute("ALTER TABLE codity.jobs DISABLE ROW LEVEL SECURITY")
    with pytest.raises(errors.InsufficientPrivilege), tx.transaction():
        tx.execute("UPDATE codity.jobs SET status = 'completed'")
    row = tx.execute(
        "SELECT rolbypassrls, rolsuper FROM pg_catalog.pg_roles WHERE rolname = 'codity_app'"
    ).fetchone()
    assert row == (False, False)
