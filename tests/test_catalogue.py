"""The catalogue: migrate is repeatable, functions are hardened and documented, roles are tight.

- ``codity migrate`` re-run, or run twice at once on an empty database, gives the same
  catalogue as one fresh run (procrastinate's migration test).
- Every SECURITY DEFINER function pins its search_path, and the list of them is reviewed
  here: a new one fails until someone adds it (Supabase's habit).
- Every function has a COMMENT (public ones end with an ``Example:`` line), none is
  executable by PUBLIC, and no private ``_`` helper by any codity_* role.
- codity_worker runs the worker protocol and touches no table; codity_readonly reads views;
  codity_app runs the operator functions. Proven by privilege checks and by SET ROLE.
- The claim index matches the claim's ORDER BY term for term.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from psycopg import errors
from psycopg.rows import TupleRow

from codity.db import migrate
from codity.db.migrate import function_files, sql_dir
from tests.conftest import cloned

Conn = psycopg.Connection[TupleRow]

CATALOGUE_QUERIES = {
    "functions": """
        SELECT p.oid::regprocedure::text, pg_catalog.pg_get_function_result(p.oid), md5(p.prosrc),
               p.prosecdef, p.proconfig, p.proacl::text[], p.provolatile, p.proparallel, p.prokind,
               pg_catalog.obj_description(p.oid, 'pg_proc'), p.proowner::regrole::text
        FROM pg_catalog.pg_proc p
        WHERE p.pronamespace = 'codity'::regnamespace
        ORDER BY 1
    """,
    "relations": """
        SELECT c.relname, c.relkind, c.relowner::regrole::text, c.relacl::text[], c.reloptions,
               c.relrowsecurity,
               c.relforcerowsecurity, pg_catalog.obj_description(c.oid, 'pg_class'),
               (SELECT array_agg(a.attname || ' ' || pg_catalog.format_type(a.atttypid, a.atttypmod)
                                 || CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END
                                 || coalesce(' DEFAULT '
                                             || pg_catalog.pg_get_expr(d.adbin, d.adrelid), '')
                                 || coalesce(' ACL ' || a.attacl::text, '')
                                 ORDER BY a.attnum)
                FROM pg_catalog.pg_attribute a
                LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
                WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped)
        FROM pg_catalog.pg_class c
        WHERE c.relnamespace = 'codity'::regnamespace
        ORDER BY 1
    """,
    "constraints": """
        SELECT con.conname, con.conrelid::regclass::text, con.contype,
               pg_catalog.pg_get_constraintdef(con.oid)
        FROM pg_catalog.pg_constraint con
        WHERE con.connamespace = 'codity'::regnamespace
        ORDER BY 2, 1
    """,
    "indexes": """
        SELECT i.indexrelid::regclass::text, pg_catalog.pg_get_indexdef(i.indexrelid),
               i.indisunique, i.indisprimary
        FROM pg_catalog.pg_index i
        JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid
        WHERE c.relnamespace = 'codity'::regnamespace
        ORDER BY 1
    """,
    "types": """
        SELECT t.typname, t.typtype, t.typacl::text[],
               (SELECT array_agg(e.enumlabel ORDER BY e.enumsortorder)
                FROM pg_catalog.pg_enum e WHERE e.enumtypid = t.oid)
        FROM pg_catalog.pg_type t
        WHERE t.typnamespace = 'codity'::regnamespace
        ORDER BY 1
    """,
    "policies": """
        SELECT pol.polname, pol.polrelid::regclass::text, pol.polcmd,
               pol.polroles::regrole[]::text[],
               pg_catalog.pg_get_expr(pol.polqual, pol.polrelid),
               pg_catalog.pg_get_expr(pol.polwithcheck, pol.polrelid)
        FROM pg_catalog.pg_policy pol
        JOIN pg_catalog.pg_class c ON c.oid = pol.polrelid
        WHERE c.relnamespace = 'codity'::regnamespace
        ORDER BY 2, 1
    """,
    "schema": """
        SELECT n.nspname, n.nspowner::regrole::text, n.nspacl::text[]
        FROM pg_catalog.pg_namespace n WHERE n.nspname = 'codity'
    """,
    # Seed data written by migrations must not be duplicated by a re-run.
    "seed_rows": """
        SELECT 'transition', t.from_status::text || '->' || t.to_status::text || ' ' || t.by_what
        FROM codity.job_transitions t
        UNION ALL
        SELECT 'project', p.slug || CASE WHEN p.is_default THEN ' (default)' ELSE '' END
        FROM codity.projects p
        ORDER BY 1, 2
    """,
}

# Every SECURITY DEFINER function, reviewed: each runs as the owner on behalf of a role
# that has no table access, with search_path pinned (pg_temp last). Add one here only after
# reviewing it. Private helpers are SECURITY INVOKER: they run inside definer functions.
REVIEWED_SECURITY_DEFINER = {
    "codity.api_key_identity(bytea,timestamp with time zone)",
    "codity.cancel(bigint,bigint,timestamp with time zone)",
    "codity.cancel_jobs(bigint[],bigint,timestamp with time zone)",
    "codity.claim_in_queue(bigint,bigint,integer,boolean,boolean,timestamp with time zone)",
    "codity.claim(bigint,text,integer,boolean,boolean,timestamp with time zone)",
    "codity.worker_queues(bigint)",
    "codity.queue_nodes(bigint)",
    "codity.get_job(bigint,bigint)",
    "codity.get_job_executions(bigint,bigint)",
    "codity.complete(bigint,integer,jsonb,timestamp with time zone)",
    "codity.cron_next(text,timestamp with time zone,text)",
    "codity.cron_validate(text,text)",
    "codity.complete_many_in_queue(bigint,bigint[],integer[],jsonb[],timestamp with time zone,"
    "boolean,integer[])",
    "codity.complete_many(bigint[],integer[],jsonb[],timestamp with time zone)",
    "codity.create_queue(text,bigint,integer,text,integer,integer,integer,integer,integer,integer,"
    "integer,integer,integer,integer,integer)",
    "codity.create_schedule(text,text,text,text,jsonb,text,integer,bigint,"
    "timestamp with time zone)",
    "codity.delete_project(bigint)",
    "codity.delete_queue(text,bigint,boolean)",
    "codity.delete_schedule(text,bigint)",
    "codity.deregister_worker(bigint,timestamp with time zone)",
    "codity.enqueue(text,text,jsonb,timestamp with time zone,integer,text,integer,bigint,"
    "timestamp with time zone)",
    "codity.enqueue_in_queue(bigint,text,jsonb,timestamp with time zone,integer,text,integer,"
    "timestamp with time zone)",
    "codity.enqueue_many_in_queue(bigint,jsonb,timestamp with time zone)",
    "codity.enqueue_many(text,jsonb,bigint,timestamp with time zone)",
    "codity.enqueue_workflow(jsonb,bigint,timestamp with time zone)",
    "codity.create_batch(jsonb,bigint,timestamp with time zone)",
    "codity.add_to_batch(bigint,jsonb,bigint,timestamp with time zone)",
    "codity.seal_batch(bigint,bigint,timestamp with time zone)",
    "codity.cancel_workflow(bigint,bigint,timestamp with time zone)",
    "codity.retry_workflow(bigint,text,bigint,timestamp with time zone)",
    "codity.skip_node(bigint,text,bigint,timestamp with time zone)",
    "codity.dep_results(bigint,bigint,integer)",
    "codity.fail_in_queue(bigint,bigint,integer,text,boolean,timestamp with time zone,integer)",
    "codity.fail(bigint,integer,text,boolean,timestamp with time zone)",
    "codity.find_project(text)",
    "codity.extend_leases(bigint,bigint,bigint[],integer[],timestamp with time zone)",
    "codity.heartbeat(bigint,bigint[],integer[],timestamp with time zone,bigint[])",
    "codity.jobs_with_payload(jsonb,bigint,integer)",
    "codity.materialize_cron(timestamp with time zone,integer)",
    "codity.pause_queue(text,bigint,timestamp with time zone)",
    "codity.pause_schedule(text,bigint,timestamp with time zone)",
    "codity.promote(timestamp with time zone,integer)",
    "codity.prune(timestamp with time zone,integer)",
    "codity.prune_housekeeping(timestamp with time zone,integer,interval,interval,interval)",
    "codity.roll_up(timestamp with time zone)",
    "codity.rate_limit_hit(text,integer,interval,integer,timestamp with time zone)",
    "codity.rate_limit_refund(text,interval,timestamp with time zone,integer,"
    "timestamp with time zone)",
    "codity.reap_in_queue(bigint,timestamp with time zone,integer)",
    "codity.reap(timestamp with time zone,integer)",
    "codity.register_worker(text,text[],integer,text,integer,bigint,numeric,"
    "timestamp with time zone)",
    "codity.configure(interval)",
    "codity.release_in_queue(bigint,bigint,integer,timestamp with time zone)",
    "codity.release_lost_claims_in_queue(bigint,bigint,bigint[],timestamp with time zone)",
    "codity.release(bigint,integer,timestamp with time zone)",
    "codity.replay_dead_letter(bigint,bigint,timestamp with time zone)",
    "codity.replay_dead_letters(bigint,text,text,timestamp with time zone,integer,"
    "timestamp with time zone,bigint,timestamp with time zone)",
    "codity.resume_all(bigint,timestamp with time zone)",
    "codity.resume_queue(text,bigint,timestamp with time zone)",
    "codity.resume_schedule(text,bigint,timestamp with time zone)",
    "codity.run_schedule_now(text,bigint,timestamp with time zone)",
    "codity.schedule_next_runs(text,integer,bigint,timestamp with time zone)",
    "codity.retry_job(bigint,bigint,timestamp with time zone)",
    "codity.retry_jobs(bigint[],bigint,timestamp with time zone)",
    "codity.start(bigint,integer,timestamp with time zone)",
    "codity.start_many_in_queue(bigint,bigint[],integer[],timestamp with time zone)",
    "codity.start_many(bigint[],integer[],timestamp with time zone)",
    "codity.sweep_workers(timestamp with time zone,interval)",
    "codity.tick(timestamp with time zone,interval)",
}

WORKER_PROTOCOL = {
    "register_worker",
    "deregister_worker",
    "claim",
    "start",
    "start_many",
    "heartbeat",
    "extend_leases",
    "claim_in_queue",
    "start_many_in_queue",
    "complete_many_in_queue",
    "fail_in_queue",
    "release_in_queue",
    "release_lost_claims_in_queue",
    "enqueue_in_queue",
    "enqueue_many_in_queue",
    "complete",
    "complete_many",
    "fail",
    "release",
    "enqueue",
    "enqueue_many",
    "worker_queues",
    "queue_nodes",
    "find_project",
    "enqueue_workflow",
    "create_batch",
    "add_to_batch",
    "seal_batch",
    "dep_results",
    "get_job",
    "get_job_executions",
}
# Pure arithmetic a worker may use to show its own retry plan; reads and writes nothing.
WORKER_PURE_HELPERS = {"backoff_delay"}

READONLY_VIEWS = {
    "queue_overview",
    "worker_overview",
    "schedule_overview",
    "job_overview",
    "execution_overview",
    "dead_letter_overview",
    "fence_rejection_overview",
}
# Reference data, not state: the state diagram (0001_schema), the installation's settings
# and how far the per-minute rollup got.
READONLY_REFERENCE_TABLES = {"job_transitions", "settings", "rollup_state"}
# The views run with the caller's rights (security_invoker), so the installation-wide read
# role reads the operational tables under them; never an auth table.
READONLY_OPERATIONAL_TABLES = {
    "queues",
    "queue_minutes",
    "queue_totals",
    "queue_limiters",
    "jobs",
    "job_executions",
    "dead_letters",
    "scheduled_jobs",
    "workers",
    "fence_rejections",
    "fence_rejection_totals",
    "workflows",
    "job_deps",
    "workflow_events",
}

TABLE_PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "TRIGGER")
ROLES = ("codity_worker", "codity_app", "codity_readonly")
# The NOLOGIN owner of everything in schema codity, and the role allowed to move p_now.
OWNER = "codity_owner"
ALL_ROLES = (*ROLES, OWNER, "codity_clock")
PINNED_SEARCH_PATH = "search_path=pg_catalog, codity, pg_temp"


def catalogue(conn: Conn) -> dict[str, list[tuple[Any, ...]]]:
    return {name: conn.execute(query).fetchall() for name, query in CATALOGUE_QUERIES.items()}


def _assert_same_catalogue(
    before: dict[str, list[tuple[Any, ...]]], after: dict[str, list[tuple[Any, ...]]]
) -> None:
    for part in CATALOGUE_QUERIES:
        gone = [row for row in before[part] if row not in after[part]]
        new = [row for row in after[part] if row not in before[part]]
        assert before[part] == after[part], f"{part} differ: gone {gone}, new {new}"


def _functions(conn: Conn) -> list[tuple[str, str, bool, list[str] | None, str | None]]:
    """(name, regprocedure, security definer, proconfig, comment) of every codity function."""
    return [
        (str(r[0]), str(r[1]), bool(r[2]), r[3], r[4])
        for r in conn.execute(
            "SELECT p.proname, p.oid::regprocedure::text, p.prosecdef, p.proconfig,"
            "       pg_catalog.obj_description(p.oid, 'pg_proc')"
            " FROM pg_catalog.pg_proc p WHERE p.pronamespace = 'codity'::regnamespace ORDER BY 2"
        )
    ]


def _executable_by(conn: Conn, role: str) -> set[str]:
    return {
        str(r[0])
        for r in conn.execute(
            "SELECT p.proname FROM pg_catalog.pg_proc p"
            " WHERE p.pronamespace = 'codity'::regnamespace"
            "   AND pg_catalog.has_function_privilege(%s, p.oid, 'EXECUTE')",
            [role],
        )
    }


def _relations(conn: Conn, kinds: str) -> list[str]:
    return [
        str(r[0])
        for r in conn.execute(
            "SELECT c.relname FROM pg_catalog.pg_class c"
            " WHERE c.relnamespace = 'codity'::regnamespace AND c.relkind = ANY (%s::char[])"
            " ORDER BY 1",
            [list(kinds)],
        )
    ]


def _table_privileges(conn: Conn, role: str, relation: str) -> list[str]:
    return [
        privilege
        for privilege in TABLE_PRIVILEGES
        if conn.execute(
            "SELECT pg_catalog.has_table_privilege(%s, %s::regclass, %s)",
            [role, f"codity.{relation}", privilege],
        ).fetchone()
        == (True,)
    ]


# ---------------------------------------------------------------------------------------
# Migrate is repeatable
# ---------------------------------------------------------------------------------------


def test_rerunning_migrate_leaves_the_catalogue_unchanged(conn: Conn, db_url: str) -> None:
    before = catalogue(conn)
    assert before["functions"], "the catalogue snapshot sees the codity functions"

    applied = migrate(db_url)

    assert applied == (0, len(function_files())), (
        "a re-run applies no migration, every function file"
    )
    _assert_same_catalogue(before, catalogue(conn))


@pytest.fixture
def empty_database(pg_server_url: str) -> Iterator[str]:
    with cloned(pg_server_url, "template0") as url:
        yield url


def test_two_migrates_at_once_on_an_empty_database_both_succeed_alike(
    empty_database: str, template_url: str
) -> None:
    start = threading.Barrier(2, timeout=60)

    def run() -> tuple[int, int]:
        start.wait()
        return migrate(empty_database)

    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = [pool.submit(run) for _ in range(2)]
        results = sorted(future.result(timeout=120) for future in futures)

    migrations = len(list((sql_dir() / "migrations").glob("*.sql")))
    files = len(function_files())
    assert results == [(0, files), (migrations, files)], (
        "one run applied the migrations, the other found none"
    )
    with (
        psycopg.connect(empty_database, autocommit=True) as fresh,
        psycopg.connect(template_url, autocommit=True) as template,
    ):
        _assert_same_catalogue(catalogue(template), catalogue(fresh))


# ---------------------------------------------------------------------------------------
# SECURITY DEFINER hygiene, comments, EXECUTE grants
# ---------------------------------------------------------------------------------------


def test_every_security_definer_function_pins_its_search_path_with_pg_temp_last(
    tx: Conn,
) -> None:
    """Left out, pg_temp is searched FIRST for tables and types: a caller's temporary
    ``CREATE DOMAIN pg_temp.timestamptz ... CHECK (pg_temp.f(...))`` would run f as the
    owner. Named last, it can never shadow anything."""
    unpinned = [
        (signature, config)
        for _, signature, definer, config, _ in _functions(tx)
        if definer and PINNED_SEARCH_PATH not in (config or [])
    ]
    assert unpinned == []


def test_every_function_that_sets_a_search_path_names_pg_temp_last(tx: Conn) -> None:
    paths = {
        signature: setting
        for _, signature, _, config, _ in _functions(tx)
        for setting in config or []
        if setting.startswith("search_path=")
    }
    assert paths, "the definer functions set a search_path"
    assert {s: p for s, p in paths.items() if not p.endswith(", pg_temp")} == {}


def test_private_helpers_are_invokers_without_a_search_path_of_their_own(tx: Conn) -> None:
    helpers = [
        (name, sig, definer, config)
        for name, sig, definer, config, _ in _functions(tx)
        if name.startswith("_")
    ]
    assert helpers
    assert [
        (sig, definer, config)
        for _, sig, definer, config in helpers
        if definer or any(c.startswith("search_path=") for c in config or [])
    ] == []


def test_everything_in_the_schema_is_owned_by_a_nologin_non_superuser(tx: Conn) -> None:
    owner = tx.execute(
        "SELECT rolcanlogin, rolsuper, rolcreaterole, rolcreatedb, rolbypassrls, rolreplication"
        " FROM pg_catalog.pg_roles WHERE rolname = %s",
        [OWNER],
    ).fetchone()
    assert owner == (False, False, False, False, False, False)
    assert tx.execute(
        "SELECT count(*) FROM pg_catalog.pg_auth_members m WHERE m.member = %s::regrole",
        [OWNER],
    ).fetchone() == (0,), "the owner is a member of no role"
    foreign = tx.execute(
        """
        SELECT 'schema', n.nspname FROM pg_catalog.pg_namespace n
        WHERE n.nspname = 'codity' AND n.nspowner <> %(owner)s::regrole
        UNION ALL
        SELECT 'relation', c.oid::regclass::text FROM pg_catalog.pg_class c
        WHERE c.relnamespace = 'codity'::regnamespace AND c.relowner <> %(owner)s::regrole
        UNION ALL
        SELECT 'function', p.oid::regprocedure::text FROM pg_catalog.pg_proc p
        WHERE p.pronamespace = 'codity'::regnamespace AND p.proowner <> %(owner)s::regrole
        UNION ALL
        SELECT 'type', t.oid::regtype::text FROM pg_catalog.pg_type t
        WHERE t.typnamespace = 'codity'::regnamespace AND t.typowner <> %(owner)s::regrole
        """,
        {"owner": OWNER},
    ).fetchall()
    assert foreign == []


def test_security_definer_functions_are_exactly_the_reviewed_list(tx: Conn) -> None:
    definers = {signature for _, signature, definer, _, _ in _functions(tx) if definer}
    assert definers - REVIEWED_SECURITY_DEFINER == set(), (
        "new SECURITY DEFINER functions: review them"
    )
    assert REVIEWED_SECURITY_DEFINER - definers == set(), (
        "reviewed functions that are gone or changed signature"
    )


def test_every_function_has_a_comment_and_public_ones_end_with_an_example(tx: Conn) -> None:
    functions = _functions(tx)
    assert [
        signature for _, signature, _, _, comment in functions if not (comment or "").strip()
    ] == []
    without_example = [
        signature
        for name, signature, _, _, comment in functions
        if not name.startswith("_")
        and not (comment or "").rstrip().splitlines()[-1].startswith("Example: ")
    ]
    assert without_example == []


def test_no_function_is_executable_by_public(tx: Conn) -> None:
    assert _executable_by(tx, "public") == set()


def test_no_private_function_is_executable_by_any_codity_role(tx: Conn) -> None:
    roles = [
        str(r[0])
        for r in tx.execute(
            # Not the services' logins (codity_*_login, made by codity up and migrate
            # --service-logins on this server by other tests): each only holds a role here.
            "SELECT rolname FROM pg_catalog.pg_roles WHERE rolname LIKE 'codity\\_%'"
            " AND rolname NOT LIKE '%\\_login'"
        )
    ]
    assert sorted(roles) == sorted(ALL_ROLES)
    callers = [role for role in roles if role != OWNER]  # the owner may run what it owns
    leaks = {
        role: sorted(n for n in _executable_by(tx, role) if n.startswith("_")) for role in callers
    }
    assert leaks == {role: [] for role in callers}


# ---------------------------------------------------------------------------------------
# Roles
# ---------------------------------------------------------------------------------------


def test_worker_role_may_execute_the_worker_protocol_and_nothing_else(tx: Conn) -> None:
    assert _executable_by(tx, "codity_worker") == WORKER_PROTOCOL | WORKER_PURE_HELPERS


def test_worker_role_has_no_privilege_on_any_table_view_or_sequence(tx: Conn) -> None:
    relations = _relations(tx, "rpvmf")
    assert "jobs" in relations
    granted = {r: p for r in relations if (p := _table_privileges(tx, "codity_worker", r))}
    assert granted == {}
    sequences = _relations(tx, "S")
    assert sequences, "identity sequences exist"
    usable = [
        s
        for s in sequences
        if tx.execute(
            "SELECT pg_catalog.has_sequence_privilege("
            "'codity_worker', %s::regclass, 'USAGE,SELECT,UPDATE')",
            [f"codity.{s}"],
        ).fetchone()
        == (True,)
    ]
    assert usable == []


def test_worker_role_cannot_read_jobs_but_runs_the_protocol_end_to_end(tx: Conn) -> None:
    tx.execute("SELECT codity.create_queue('emails', p_max_attempts => 3)")
    tx.execute("SET ROLE codity_worker")

    with pytest.raises(errors.InsufficientPrivilege), tx.transaction():
        tx.execute("SELECT count(*) FROM codity.jobs")
    with pytest.raises(errors.InsufficientPrivilege), tx.transaction():
        tx.execute("SELECT * FROM codity.queue_overview")
    with pytest.raises(errors.InsufficientPrivilege), tx.transaction():
        tx.execute("SELECT * FROM codity.reap()")
    with pytest.raises(errors.InsufficientPrivilege), tx.transaction():
        tx.execute("SELECT * FROM codity.create_queue('mine')")

    def one(query: str, params: list[Any] | None = None) -> TupleRow:
        row = tx.execute(query, params).fetchone()
        assert row is not None
        return row

    (worker,) = one("SELECT codity.register_worker('w1', ARRAY['emails'], 4, 'host-a', 99)")
    one("SELECT job_id FROM codity.enqueue('emails', 'emails.send', '{\"to\": \"a@example.com\"}')")
    tx.execute('SELECT * FROM codity.enqueue_many(\'emails\', \'[{"task": "a"}, {"task": "b"}]\')')
    claimed = tx.execute(
        "SELECT job_id, fence FROM codity.claim(%s, 'emails', 3)", [worker]
    ).fetchall()
    assert len(claimed) == 3
    (done, done_fence), (failing, failing_fence), (released, released_fence) = claimed
    assert one("SELECT accepted FROM codity.start(%s, %s)", [done, done_fence]) == (True,)
    states = tx.execute(
        "SELECT state FROM codity.heartbeat(%s, %s::bigint[], %s::integer[])",
        [worker, [done, failing], [done_fence, failing_fence]],
    ).fetchall()
    assert states == [("extended",), ("extended",)]
    assert one(
        "SELECT accepted FROM codity.complete(%s, %s, '{\"ok\": true}')", [done, done_fence]
    ) == (True,)
    one("SELECT accepted FROM codity.start(%s, %s)", [failing, failing_fence])
    assert one(
        "SELECT job_status::text FROM codity.fail(%s, %s, 'boom')", [failing, failing_fence]
    ) == ("scheduled",)
    assert one(
        "SELECT job_status::text FROM codity.release(%s, %s)", [released, released_fence]
    ) == ("queued",)
    one("SELECT job_id FROM codity.claim(%s, 'emails')", [worker])
    assert one("SELECT codity.deregister_worker(%s)", [worker]) == (1,)

    tx.execute("RESET ROLE")
    statuses = tx.execute("SELECT status::text FROM codity.jobs ORDER BY id").fetchall()
    assert statuses == [("completed",), ("scheduled",), ("queued",)]


def test_readonly_role_reads_views_and_operational_tables_only_and_writes_nothing(
    tx: Conn,
) -> None:
    tables = _relations(tx, "rpf")
    readable = {t: p for t in tables if (p := _table_privileges(tx, "codity_readonly", t))}
    assert set(readable) == READONLY_REFERENCE_TABLES | READONLY_OPERATIONAL_TABLES
    assert all(p == ["SELECT"] for p in readable.values()), readable
    assert {
        v for v in _relations(tx, "v") if _table_privileges(tx, "codity_readonly", v) == ["SELECT"]
    } == READONLY_VIEWS

    tx.execute("SELECT codity.create_queue('emails')")
    worker = tx.execute("SELECT codity.register_worker('w1')").fetchone()
    assert worker is not None
    tx.execute("SET ROLE codity_readonly")
    for view in sorted(READONLY_VIEWS):
        tx.execute(f"SELECT * FROM codity.{view}").fetchall()
    assert tx.execute("SELECT queue FROM codity.queue_overview").fetchall() == [("emails",)]
    assert tx.execute("SELECT count(*) FROM codity.workers").fetchone() == (1,)
    with pytest.raises(errors.InsufficientPrivilege), tx.transaction():
        tx.execute("SELECT * FROM codity.users")
    with pytest.raises(errors.InsufficientPrivilege), tx.transaction():
        tx.execute("UPDATE codity.jobs SET priority = 1")
    with pytest.raises(errors.InsufficientPrivilege), tx.transaction():
        tx.execute("SELECT * FROM codity.claim(%s, 'emails')", [worker[0]])
    with pytest.raises(errors.InsufficientPrivilege), tx.transaction():
        tx.execute("SELECT * FROM codity.enqueue('emails', 't')")


def test_app_role_runs_the_operator_functions(tx: Conn) -> None:
    public = {name for name, _, _, _, _ in _functions(tx) if not name.startswith("_")}
    assert _executable_by(tx, "codity_app") == public

    (default_project,) = tx.execute(
        "SELECT id FROM codity.projects WHERE is_default"
    ).fetchone() or (None,)
    tx.execute("SET ROLE codity_app")
    with pytest.raises(errors.InsufficientPrivilege), tx.transaction():
        tx.execute("UPDATE codity.jobs SET priority = 1")
    tx.execute("SELECT * FROM codity.create_queue('emails')")
    (job,) = tx.execute("SELECT job_id FROM codity.enqueue('emails', 't')").fetchone() or (None,)
    # Row-level security: with no project set, the app role sees no job at all.
    assert tx.execute("SELECT count(*) FROM codity.jobs").fetchone() == (0,)
    tx.execute("SELECT set_config('codity.project_id', %s, false)", [str(default_project)])
    assert tx.execute("SELECT count(*) FROM codity.jobs").fetchone() == (1,)
    assert tx.execute("SELECT codity.pause_queue('emails')").fetchone() == (True,)
    assert tx.execute("SELECT codity.resume_queue('emails')").fetchone() == (True,)
    tx.execute("SELECT * FROM codity.create_schedule('nightly', 'emails', '0 2 * * *', 't')")
    assert tx.execute("SELECT codity.pause_schedule('nightly')").fetchone() == (True,)
    assert tx.execute("SELECT codity.resume_schedule('nightly')").fetchone() == (True,)
    assert tx.execute("SELECT * FROM codity.resume_all()").fetchone() == (0, 0)
    assert tx.execute("SELECT * FROM codity.tick()").fetchone() is not None
    assert tx.execute("SELECT job_status::text FROM codity.cancel(%s)", [job]).fetchone() == (
        "cancelled",
    )
    tx.execute("SELECT queue FROM codity.queue_overview").fetchall()


@pytest.mark.parametrize("role", ["codity_app", "codity_readonly"])
def test_a_role_granted_the_cron_functions_can_run_them(tx: Conn, role: str) -> None:
    assert {"cron_next", "cron_validate"} <= _executable_by(tx, role)
    tx.execute(f"SET ROLE {role}")
    next_run = tx.execute(
        "SELECT codity.cron_next('0 2 * * *', '2030-01-01 00:00Z', 'Europe/London')"
    ).fetchone()
    assert next_run is not None
    assert next_run[0] == datetime(2030, 1, 1, 2, 0, tzinfo=UTC)
    tx.execute("SELECT codity.cron_validate('*/15 9-17 * * MON-FRI', 'Europe/London')")


# ---------------------------------------------------------------------------------------
# The claim index
# ---------------------------------------------------------------------------------------


def test_claim_index_matches_the_claim_order_by_term_for_term(tx: Conn) -> None:
    row = tx.execute(
        "SELECT pg_catalog.pg_get_indexdef('codity.jobs_claim_idx'::regclass)"
    ).fetchone()
    assert row is not None
    indexdef = str(row[0])
    match = re.fullmatch(
        r"CREATE INDEX jobs_claim_idx ON codity\.jobs USING btree \((.*)\)"
        r" INCLUDE \((.*)\) WHERE \((.*)\)",
        indexdef,
    )
    assert match, indexdef
    columns = [c.strip() for c in match.group(1).split(",")]
    assert columns == ["queue_id", "priority DESC", "run_at", "id"]
    assert match.group(2) == "project_id"  # carried for the dashboard's counts (0042)
    assert match.group(3) == "status = 'queued'::codity.job_status"

    row = tx.execute(
        "SELECT p.prosrc FROM pg_catalog.pg_proc p"
        " WHERE p.oid ="
        " 'codity.claim_in_queue(bigint,bigint,integer,boolean,boolean,timestamptz)'::regprocedure"
    ).fetchone()
    assert row is not None
    picked = re.search(r"picked AS MATERIALIZED \((.*?)\n\s*\)\n", str(row[0]), re.S)
    assert picked, "claim picks its rows in a MATERIALIZED CTE"
    body = " ".join(picked.group(1).split())
    assert "j.queue_id = v_queue.id" in body and "j.status = 'queued'" in body, body
    assert "FOR UPDATE SKIP LOCKED" in body, body
    order_by = re.search(r"ORDER BY (.*?) LIMIT", body)
    assert order_by, body
    terms = [t.strip().removeprefix("j.") for t in order_by.group(1).split(",")]
    # The leading index column is the claim's equality condition; the rest is its ORDER BY.
    assert ["queue_id", *terms] == columns
