"""Real PostgreSQL for every test, never a mock.

Where the server comes from, in order: ``CODITY_TEST_DATABASE_URL`` (a role that may
create databases), else a testcontainers PostgreSQL when a Docker engine answers, else a
throwaway cluster of the embedded server in a temporary folder on a free port. It never
skips. A template database is migrated once per session; every test that commits gets
its own database cloned from it (Graphile Worker, procrastinate).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql

from codity.db import migrate
from codity.db.embedded import EmbeddedServer
from tests.ports import free_port

TEMPLATE = f"codity_template_{os.getpid()}"


def _with_database(url: str, name: str) -> str:
    """The same server URL with another database name (URLs only, as yoyo needs them)."""
    parts = urlsplit(url)
    if parts.scheme not in {"postgres", "postgresql", "postgresql+psycopg2"}:
        raise ValueError("CODITY_TEST_DATABASE_URL must be a postgresql:// URL")
    return urlunsplit(("postgresql", parts.netloc, f"/{name}", parts.query, ""))


def _docker_answers() -> bool:
    if not shutil.which("docker"):
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="session")
def pg_server_url() -> Iterator[str]:
    """A URL to the maintenance database of a server where we may create databases."""
    given = os.environ.get("CODITY_TEST_DATABASE_URL")
    if given:
        yield given
        return
    if _docker_answers():
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer("postgres:18", driver=None) as container:
            yield container.get_connection_url()
        return
    home = Path(tempfile.mkdtemp(prefix="codity-test-"))
    bin_dir = os.environ.get("CODITY_PG_BIN")
    server = EmbeddedServer(
        home,
        free_port(),
        bin_dir=Path(bin_dir) if bin_dir else None,
        settings=[
            "fsync=off",
            "synchronous_commit=off",
            "full_page_writes=off",
            "max_connections=200",
        ],
    )
    server.start()
    try:
        yield server.url("postgres")
    finally:
        server.destroy()


@pytest.fixture(scope="session")
def template_url(pg_server_url: str) -> Iterator[str]:
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(TEMPLATE)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(TEMPLATE)))
    url = _with_database(pg_server_url, TEMPLATE)
    migrate(url)
    fault = os.environ.get("CODITY_FAULT")
    if fault:
        from tests.faults import inject

        inject(url, fault)
    yield url
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(TEMPLATE))
        )


def clone_database(pg_server_url: str, template: str) -> tuple[str, str]:
    name = f"codity_t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(template)
            )
        )
    return name, _with_database(pg_server_url, name)


def drop_database(pg_server_url: str, name: str) -> None:
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


@pytest.fixture
def db_url(pg_server_url: str, template_url: str) -> Iterator[str]:
    """A freshly migrated database of this test's own, dropped afterwards."""
    name, url = clone_database(pg_server_url, TEMPLATE)
    try:
        yield url
    finally:
        drop_database(pg_server_url, name)


@pytest.fixture
def conn(db_url: str) -> Iterator[psycopg.Connection]:
    """An autocommit connection to this test's database."""
    with psycopg.connect(db_url, autocommit=True) as connection:
        yield connection
