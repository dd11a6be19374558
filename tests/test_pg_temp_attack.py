"""No caller reaches the owner's rights through its temporary schema (the pg_temp hole).

PostgreSQL searches the session's temporary schema for tables and types, and FIRST unless
the search_path names ``pg_temp`` somewhere else. A SECURITY DEFINER function pinned to
``pg_catalog, codity`` alone therefore let any caller define ``pg_temp.timestamptz`` as a
domain whose CHECK calls the caller's own function, and that function then ran as the
function's owner (a superuser, before migration 0004). The defence is twofold: every
definer names pg_temp last, and the owner is a NOLOGIN role with no power beyond codity's
tables.

As a real LOGIN role holding only codity_worker, codity_app or codity_readonly, each test
shadows in pg_temp every type name the bodies use (domains whose CHECK raises), tables named
like codity's (with triggers that raise), operators and functions, then calls every function
the role may execute (tests/sql_scenarios.py). The shadows must never run, and every call
must return exactly what it returns without them: the same calls are replayed in the same
transaction after rolling the shadows back, with the sequences reset.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg import errors

from tests import sql_scenarios
from tests.logins import login_role

ROLES = ("codity_worker", "codity_app", "codity_readonly")
MARK = "SHADOW RAN"

TYPE_SHADOWS = {
    # name in pg_temp -> the type it pretends to be
    "text": "pg_catalog.text",
    "varchar": "pg_catalog.varchar",
    "name": "pg_catalog.name",
    "timestamptz": "pg_catalog.timestamptz",
    "timestamp": "pg_catalog.timestamp",
    "date": "pg_catalog.date",
    "interval": "pg_catalog.interval",
    "jsonb": "pg_catalog.jsonb",
    "json": "pg_catalog.json",
    "bigint": "pg_catalog.int8",
    "int8": "pg_catalog.int8",
    "integer": "pg_catalog.int4",
    "int": "pg_catalog.int4",
    "int4": "pg_catalog.int4",
    "smallint": "pg_catalog.int2",
    "int2": "pg_catalog.int2",
    "numeric": "pg_catalog.numeric",
    "float8": "pg_catalog.float8",
    "boolean": "pg_catalog.bool",
    "bool": "pg_catalog.bool",
    "bytea": "pg_catalog.bytea",
    "uuid": "pg_catalog.uuid",
    "regclass": "pg_catalog.regclass",
    # codity's own type names, unqualified
    "job_status": "pg_catalog.text",
    "execution_status": "pg_catalog.text",
    "worker_status": "pg_catalog.text",
    "member_role": "pg_catalog.text",
    "backoff_kind": "pg_catalog.text",
}

# Operators the bodies use, on the types they use them with.
OPERATOR_SHADOWS = [
    ("=", "pg_catalog.int8", "pg_catalog.int8"),
    ("=", "pg_catalog.int4", "pg_catalog.int4"),
    ("=", "pg_catalog.text", "pg_catalog.text"),
    ("<>", "pg_catalog.int4", "pg_catalog.int4"),
    ("<=", "pg_catalog.timestamptz", "pg_catalog.timestamptz"),
    ("<", "pg_catalog.timestamptz", "pg_catalog.timestamptz"),
    ("+", "pg_catalog.timestamptz", "pg_catalog.interval"),
    ("-", "pg_catalog.int4", "pg_catalog.int4"),
    ("->>", "pg_catalog.jsonb", "pg_catalog.text"),
    ("->", "pg_catalog.jsonb", "pg_catalog.text"),
    ("?", "pg_catalog.jsonb", "pg_catalog.text"),
    ("||", "pg_catalog.jsonb", "pg_catalog.jsonb"),
    ("||", "pg_catalog.text", "pg_catalog.text"),
]

# Functions the bodies call unqualified (pg_temp is never searched for functions; proven).
FUNCTION_SHADOWS = [
    ("now", ""),
    ("format", "pg_catalog.text"),
    ("jsonb_typeof", "pg_catalog.jsonb"),
    ("cardinality", "pg_catalog.anyarray"),
    ("length", "pg_catalog.text"),
    ("octet_length", "pg_catalog.text"),
    ("array_position", "pg_catalog.anyarray, pg_catalog.anyelement"),
    ("random", ""),
]


def _codity_tables(admin: psycopg.Connection[Any]) -> list[str]:
    return [
        str(r[0])
        for r in admin.execute(
            "SELECT c.relname FROM pg_catalog.pg_class c"
            " WHERE c.relnamespace = 'codity'::regnamespace AND c.relkind IN ('r', 'v', 'p')"
            " ORDER BY 1"
        )
    ]


def create_shadows(conn: psycopg.Connection[Any], tables: list[str]) -> int:
    """Shadow every name in the caller's pg_temp; each shadow raises MARK when it runs."""
    statements = [
        f"""CREATE FUNCTION pg_temp.shadow_ran(anyelement) RETURNS boolean LANGUAGE plpgsql
            AS $$ BEGIN RAISE EXCEPTION '{MARK} as % (session %)', current_user, session_user;
            END $$""",
        f"""CREATE FUNCTION pg_temp.shadow_trigger() RETURNS trigger LANGUAGE plpgsql
            AS $$ BEGIN RAISE EXCEPTION '{MARK} (trigger) as %', current_user; END $$""",
    ]
    for name, base in TYPE_SHADOWS.items():
        statements.append(
            f'CREATE DOMAIN pg_temp."{name}" AS {base} CHECK (pg_temp.shadow_ran(VALUE))'
        )
    for i, (op, left, right) in enumerate(OPERATOR_SHADOWS):
        statements.append(
            f"CREATE FUNCTION pg_temp.shadow_op_{i}({left}, {right}) RETURNS boolean"
            f" LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION '{MARK} (operator {op})'; END $$"
        )
        statements.append(
            f"CREATE OPERATOR pg_temp.{op} (LEFTARG = {left}, RIGHTARG = {right},"
            f" FUNCTION = pg_temp.shadow_op_{i})"
        )
    for name, args in FUNCTION_SHADOWS:
        statements.append(
            f"CREATE FUNCTION pg_temp.{name}({args}) RETURNS pg_catalog.text LANGUAGE plpgsql"
            f" AS $$ BEGIN RAISE EXCEPTION '{MARK} (function {name})'; END $$"
        )
    for table in tables:
        statements.append(
            f'CREATE TEMP TABLE "{table}" (id pg_catalog.int8, status pg_catalog.text,'
            " queue_id pg_catalog.int8, project_id pg_catalog.int8)"
        )
        statements.append(f"INSERT INTO pg_temp.\"{table}\" VALUES (1, 'queued', 1, 1)")
        statements.append(
            f'CREATE TRIGGER shadow BEFORE INSERT OR UPDATE OR DELETE ON pg_temp."{table}"'
            " FOR EACH ROW EXECUTE FUNCTION pg_temp.shadow_trigger()"
        )
    for statement in statements:
        conn.execute(statement.encode())
    return len(statements)


def _sequences(admin: psycopg.Connection[Any]) -> list[tuple[str, int, bool]]:
    names = [
        str(r[0])
        for r in admin.execute(
            "SELECT c.oid::regclass::text FROM pg_catalog.pg_class c"
            " WHERE c.relnamespace = 'codity'::regnamespace AND c.relkind = 'S'"
        )
    ]
    result = []
    for name in names:
        row = admin.execute(f"SELECT last_value, is_called FROM {name}").fetchone()
        assert row is not None
        result.append((name, int(row[0]), bool(row[1])))
    return result


def _restore(admin: psycopg.Connection[Any], sequences: list[tuple[str, int, bool]]) -> None:
    for name, value, called in sequences:
        admin.execute("SELECT pg_catalog.setval(%s::regclass, %s, %s)", [name, value, called])


def _play(conn: psycopg.Connection[Any], role: str, world: dict[str, Any]) -> list[Any]:
    conn.execute("SELECT pg_catalog.setseed(0.25)")  # fail's backoff jitter, drawn alike twice
    return sql_scenarios.run(conn, role, world)


def play_with_and_without_shadows(db_url: str, role: str) -> tuple[list[Any], list[Any]]:
    """As a fresh login holding ``role``: shadow everything, play the role's scenario, roll
    the shadows and the writes back, play it again; returns both plays' results."""
    with psycopg.connect(db_url, autocommit=True) as admin:
        world = sql_scenarios.set_up(admin)
        tables = _codity_tables(admin)
        sequences = _sequences(admin)
        with login_role(db_url, role) as url, psycopg.connect(url) as attacker:
            # One transaction throughout, so now() is the same in both plays.
            attacker.execute("SAVEPOINT clean")
            shadows = create_shadows(attacker, tables)
            assert shadows > 100
            # The shadows are live: called by name from the attacker's own SQL, they run.
            with pytest.raises(errors.RaiseException, match=MARK):
                attacker.execute("SAVEPOINT probe")
                attacker.execute("SELECT pg_catalog.now()::timestamptz")
            attacker.execute("ROLLBACK TO SAVEPOINT probe")

            shadowed = _play(attacker, role, world)
            attacker.execute("ROLLBACK TO SAVEPOINT clean")  # the shadows and every write
            _restore(admin, sequences)
            plain = _play(attacker, role, world)
            attacker.execute("ROLLBACK")
    return shadowed, plain


@pytest.mark.parametrize("role", ROLES)
def test_scenarios_call_every_function_the_role_may_execute(
    tx: psycopg.Connection[Any], role: str
) -> None:
    executable = {
        str(r[0])
        for r in tx.execute(
            "SELECT p.proname FROM pg_catalog.pg_proc p"
            " WHERE p.pronamespace = 'codity'::regnamespace"
            "   AND pg_catalog.has_function_privilege(%s, p.oid, 'EXECUTE')",
            [role],
        )
    }
    assert executable
    assert executable - sql_scenarios.called_functions(role) == set()


@pytest.mark.parametrize("role", ROLES)
def test_shadows_in_pg_temp_never_run_and_change_no_result(db_url: str, role: str) -> None:
    shadowed, plain = play_with_and_without_shadows(db_url, role)
    assert len(shadowed) == len(sql_scenarios.SCENARIOS[role])
    assert shadowed == plain


def test_the_published_exploit_gains_nothing(db_url: str) -> None:
    """The review's exploit, verbatim in spirit: a readonly login, a domain over timestamptz
    whose CHECK runs the caller's function, then codity.cron_next. Its function would
    ALTER ROLE itself to SUPERUSER; it must not even run."""
    with login_role(db_url, "codity_readonly") as url:
        with psycopg.connect(url, autocommit=True) as attacker:
            me = attacker.execute("SELECT current_user").fetchone()
            assert me is not None
            attacker.execute(
                f"""CREATE FUNCTION pg_temp.f(pg_catalog.timestamptz) RETURNS boolean
                    LANGUAGE plpgsql AS $$
                    BEGIN
                        EXECUTE 'ALTER ROLE {me[0]} SUPERUSER';
                        RAISE EXCEPTION '{MARK} as %', current_user;
                    END $$""".encode()
            )
            attacker.execute(
                "CREATE DOMAIN pg_temp.timestamptz AS pg_catalog.timestamptz"
                " CHECK (pg_temp.f(NULL))"
            )
            row = attacker.execute(
                "SELECT codity.cron_next('0 2 * * *', '2030-01-01 00:00Z', 'UTC')"
            ).fetchone()
            assert row is not None
            assert str(row[0]).startswith("2030-01-01 02:00:00")
        with psycopg.connect(db_url, autocommit=True) as admin:
            assert admin.execute(
                "SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = %s", [me[0]]
            ).fetchone() == (False,)


def test_a_slipped_definer_runs_the_callers_code_as_a_powerless_owner(db_url: str) -> None:
    """The second wall. With pg_temp left out of one definer's search_path on purpose (the
    old bug), the caller's shadow does run, but as codity_owner, which cannot make anyone a
    superuser."""
    with psycopg.connect(db_url, autocommit=True) as admin:
        admin.execute(
            "ALTER FUNCTION codity.cron_next(text, timestamptz, text)"
            " SET search_path = pg_catalog, codity"
        )
    with login_role(db_url, "codity_readonly") as url:
        with psycopg.connect(url, autocommit=True) as attacker:
            me = attacker.execute("SELECT current_user").fetchone()
            assert me is not None
            attacker.execute(
                f"""CREATE FUNCTION pg_temp.f(pg_catalog.timestamptz) RETURNS boolean
                    LANGUAGE plpgsql AS $$
                    BEGIN
                        RAISE NOTICE 'running as %', current_user;
                        EXECUTE 'ALTER ROLE {me[0]} SUPERUSER';
                        RETURN true;
                    END $$""".encode()
            )
            attacker.execute(
                "CREATE DOMAIN pg_temp.timestamptz AS pg_catalog.timestamptz"
                " CHECK (pg_temp.f(NULL))"
            )
            # PostgreSQL 18 says "permission denied to alter role", 15 "must be superuser ...".
            with pytest.raises(errors.InsufficientPrivilege, match=r"permission denied|superuser"):
                attacker.execute("SELECT codity.cron_next('0 2 * * *', '2030-01-01 00:00Z', 'UTC')")
        with psycopg.connect(db_url, autocommit=True) as admin:
            assert admin.execute(
                "SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = %s", [me[0]]
            ).fetchone() == (False,)
