"""``codity migrate``: versioned migrations first, then the repeatable functions.

sql/migrations/ (yoyo) is append-only and creates tables, types, indexes and roles.
sql/functions/ is repeatable: every file is re-applied, in name order, in one
transaction after the migrations, so the database always runs the code in the repo
(Flyway's repeatable migrations). Private helpers are named ``_*`` and so sort first.

Two ``migrate`` runs at once are serialised by a session advisory lock held for the
whole run; the second then finds nothing to apply and re-applies the same functions.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import psycopg

__all__ = ["function_files", "migrate", "migration_ids", "sql_dir"]

log = logging.getLogger(__name__)

# pg_advisory_lock key for migrations: the bytes "codity.m" read as a bigint.
MIGRATE_LOCK_KEY = int.from_bytes(b"codity.m", "big") & 0x7FFF_FFFF_FFFF_FFFF


def sql_dir() -> Path:
    override = os.environ.get("CODITY_SQL_DIR")
    return Path(override) if override else Path(__file__).resolve().parents[2] / "sql"


def function_files() -> list[Path]:
    return sorted((sql_dir() / "functions").glob("*.sql"), key=lambda p: p.name)


def migration_ids() -> list[str]:
    """The migrations this code expects applied, by yoyo id (the file name without .sql)."""
    return sorted(p.stem for p in (sql_dir() / "migrations").glob("*.sql"))


def _yoyo_url(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in {"postgres", "postgresql", "postgresql+psycopg"}:
        raise ValueError("DATABASE_URL must be a postgresql:// URL")
    return f"postgresql+psycopg://{rest}"


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


def _apply_functions(conn: psycopg.Connection) -> int:
    files = function_files()
    with conn.transaction():
        # Bodies refer to functions defined in later files; check them once all exist.
        conn.execute("SET LOCAL check_function_bodies = off")
        for path in files:
            conn.execute(path.read_text().encode())
    return len(files)


def migrate(url: str) -> tuple[int, int]:
    """Apply pending migrations and every function file; returns (migrations, function files)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_catalog.pg_advisory_lock(%s)", [MIGRATE_LOCK_KEY])
        try:
            applied = _apply_migrations(url)
            functions = _apply_functions(conn)
        finally:
            conn.execute("SELECT pg_catalog.pg_advisory_unlock(%s)", [MIGRATE_LOCK_KEY])
    log.info("applied %d migration(s) and %d function file(s)", applied, functions)
    return applied, functions
