"""``codity migrate``: versioned migrations first, then the repeatable functions.

sql/migrations/ (yoyo) is append-only and creates tables, types, indexes and roles.
sql/functions/ is repeatable: every file is re-applied, in name order, in one
transaction after the migrations, so the database always runs the code in the repo
(Flyway's repeatable migrations). Private helpers are named ``_*`` and so sort first.

Between the two, everything in schema codity is handed to the NOLOGIN role codity_owner
(migration 0004), and the function files are applied as that role: SECURITY DEFINER
functions then run as a role that owns codity's tables and nothing else, never as the
superuser that may have run the migration. The hand-over runs every time, so an object a
later migration creates as the migrating login is adopted too.

Two ``migrate`` runs at once are serialised by a session advisory lock held for the
whole run; the second then finds nothing to apply and re-applies the same functions.

On a Citus coordinator (``migrate(url, citus=True)``, ``codity migrate --citus``) the roles
Citus connects between nodes as get LOGIN before the function files (Citus creates each
function on every node over such a connection), and codity.db.citus distributes the tables
and the by-queue bodies last. Once distributed, a plain ``migrate`` does the same, so the
upgrade of a cluster is the same command as on one server; a coordinator with worker nodes
that is not distributed yet is refused without ``citus=True`` rather than half-migrated.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from pathlib import Path
from urllib.parse import urlencode

import psycopg
from psycopg.conninfo import conninfo_to_dict

from codity.db import citus as citus_cluster
from codity.db.conninfo import conninfo

__all__ = ["function_files", "migrate", "migration_ids", "sql_dir"]

log = logging.getLogger(__name__)

# pg_advisory_lock key for migrations: the bytes "codity.m" read as a bigint.
MIGRATE_LOCK_KEY = int.from_bytes(b"codity.m", "big") & 0x7FFF_FFFF_FFFF_FFFF


def sql_dir() -> Path:
    """The SQL that ships in the package (``codity.sql``: sql/ of the checkout), or
    CODITY_SQL_DIR. A directory on disk: installs are wheels, never zip imports."""
    override = os.environ.get("CODITY_SQL_DIR")
    if override:
        return Path(override)
    spec = importlib.util.find_spec("codity.sql")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "the codity.sql package data is missing: reinstall codity (pip install ., or pip"
            " install -e . from a checkout), or set CODITY_SQL_DIR to a checkout's sql/"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def function_files() -> list[Path]:
    return sorted((sql_dir() / "functions").glob("*.sql"), key=lambda p: p.name)


def migration_ids() -> list[str]:
    """The migrations this code expects applied, by yoyo id (the file name without .sql)."""
    return sorted(p.stem for p in (sql_dir() / "migrations").glob("*.sql"))


def _yoyo_url(url: str) -> str:
    """yoyo's URL for the same connection. Its parser takes one host and port, so a URL
    naming several (``postgresql://a:5432,b:5432/codity``) went wrong: every parameter,
    hosts and ports included, travels in the query string instead, which yoyo hands to
    psycopg as they are."""
    params = conninfo_to_dict(conninfo(url, application_name="codity-migrate"))
    return "postgresql+psycopg:///?" + urlencode({k: str(v) for k, v in params.items()})


def _apply_migrations(url: str) -> int:
    from yoyo import get_backend, read_migrations

    backend = get_backend(_yoyo_url(url))
    try:
        migrations = read_migrations(str(sql_dir() / "migrations"))
        with backend.lock():
            pending = backend.to_apply(migrations)
            backend.apply_migrations(pending)
        return len(pending)
    finally:
        backend.connection.close()


# Hands every object of schema codity that codity_owner does not own yet over to it. Types
# that belong to a table (its row type) or to an array follow their table; sequences owned
# by a column follow their table too.
_ADOPT = """
DO $adopt$
DECLARE
    v_owner oid := 'codity_owner'::regrole;
    v_object record;
BEGIN
    IF (SELECT n.nspowner FROM pg_catalog.pg_namespace n WHERE n.nspname = 'codity') <> v_owner THEN
        ALTER SCHEMA codity OWNER TO codity_owner;
    END IF;
    FOR v_object IN
        SELECT CASE c.relkind WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW'
                              WHEN 'S' THEN 'SEQUENCE' ELSE 'TABLE' END AS kind,
               c.oid::regclass::text AS name
        FROM pg_catalog.pg_class c
        WHERE c.relnamespace = 'codity'::regnamespace
          AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
          AND c.relowner <> v_owner
          AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
                          WHERE d.classid = 'pg_catalog.pg_class'::regclass AND d.objid = c.oid
                            AND d.deptype IN ('a', 'i'))
        UNION ALL
        SELECT 'TYPE', t.oid::regtype::text
        FROM pg_catalog.pg_type t
        WHERE t.typnamespace = 'codity'::regnamespace AND t.typowner <> v_owner
          AND t.typtype IN ('e', 'd')
        UNION ALL
        SELECT 'ROUTINE', p.oid::regprocedure::text
        FROM pg_catalog.pg_proc p
        WHERE p.pronamespace = 'codity'::regnamespace AND p.proowner <> v_owner
    LOOP
        EXECUTE pg_catalog.format('ALTER %s %s OWNER TO codity_owner',
                                  v_object.kind, v_object.name);
    END LOOP;
END
$adopt$
"""


def _adopt_objects(conn: psycopg.Connection) -> None:
    with conn.transaction():
        conn.execute(_ADOPT)


def _apply_functions(conn: psycopg.Connection, *, cluster: bool = False) -> int:
    files = function_files()
    with conn.transaction():
        # As the owner: a new function is codity_owner's from the start, and a replaced one
        # stays so (CREATE OR REPLACE keeps the owner).
        conn.execute("SET LOCAL ROLE codity_owner")
        # Bodies refer to functions defined in later files; check them once all exist.
        conn.execute("SET LOCAL check_function_bodies = off")
        for path in files:
            conn.execute(path.read_text().encode())
        if cluster:
            citus_cluster.adjust_functions(conn)
    return len(files)


def _citus_workers(conn: psycopg.Connection) -> int:
    """How many worker nodes a Citus coordinator has (0 without Citus)."""
    if citus_cluster.citus_version(conn) is None:
        return 0
    row = conn.execute(
        "SELECT count(*) FROM pg_catalog.pg_dist_node WHERE noderole = 'primary' AND groupid <> 0"
    ).fetchone()
    return int(row[0]) if row else 0


def migrate(url: str, *, citus: bool = False, shards: int | None = None) -> tuple[int, int]:
    """Apply pending migrations and every function file, and on Citus distribute (the
    module's docstring); returns (migrations, function files). Raises
    codity.db.citus.CitusError when the cluster is not fit."""
    with psycopg.connect(conninfo(url), autocommit=True) as conn:
        conn.execute("SELECT pg_catalog.pg_advisory_lock(%s)", [MIGRATE_LOCK_KEY])
        try:
            citus_cluster.refuse_worker_node(conn)
            if citus:
                citus_cluster.check_cluster(conn)
            distributed = citus_cluster.is_distributed(conn)
            if not citus and not distributed and _citus_workers(conn) > 0:
                raise citus_cluster.CitusError(
                    "this database is a Citus coordinator with worker nodes: run"
                    " codity migrate --citus to distribute Codity over them"
                )
            applied = _apply_migrations(url)
            # /readyz compares what is applied with what the code expects, as the web app's
            # login, which holds codity_app only (docs/SECURITY.md).
            try:
                conn.execute(
                    "GRANT SELECT ON public._yoyo_migration TO codity_app, codity_readonly"
                )
            except psycopg.errors.InsufficientPrivilege:
                log.warning("/readyz needs codity_app to read public._yoyo_migration; its owner"
                            " may grant it")  # fmt: skip
            on_cluster = citus or distributed
            if on_cluster:
                citus_cluster.grant_logins(conn)
            _adopt_objects(conn)
            functions = _apply_functions(conn, cluster=distributed)
            if on_cluster and citus_cluster.distribute(conn, shards=shards).newly_distributed:
                # A function whose signature names the row type of a table that was local
                # when it was created (codity._lock_fenced_job returns codity.jobs) is not
                # created on the worker nodes; created again now the table is distributed,
                # Citus creates it there too.
                _apply_functions(conn, cluster=True)
        finally:
            conn.execute("SELECT pg_catalog.pg_advisory_unlock(%s)", [MIGRATE_LOCK_KEY])
    log.info("applied %d migration(s) and %d function file(s)", applied, functions)
    return applied, functions
