"""Real PostgreSQL for every test, never a mock.

Where the server comes from, in order: ``CODITY_TEST_DATABASE_URL`` (a role that may
create databases); else a testcontainers PostgreSQL, only when asked for with
``CODITY_TEST_CONTAINER=<image>`` (e.g. ``postgres:18``: a machine may run a Docker engine
and still reach no image registry, so a running engine is never reason enough); else a
throwaway cluster of the embedded server in a temporary folder on a free port, the default.
It never skips. A template database is migrated once per session; every test that commits
gets its own database cloned from it (Graphile Worker, procrastinate), a test that needs one
connection and no commit gets a rolled-back transaction on one shared clone (``tx``, River),
and a world of rows many tests start from is built once into a template of its own
(``world_template``) and cloned per test.

Citus: the tests marked ``citus`` take ``citus_db_url``, a distributed database of their own
on a cluster of three nodes on loopback (tests/citus.py). With ``CODITY_TEST_CITUS=1`` the
whole session's server is such a cluster instead, the template distributed by
``migrate(..., citus=True)`` and every clone made on every node, so any part of the suite
runs on a cluster (``CODITY_TEST_CITUS=1 ./test tests/test_x.py``): a way to find what a
cluster refuses, not a suite that passes there (a test that reads a table in the
transaction in which a SECURITY DEFINER function wrote it is refused by Citus, for one).
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql
from psycopg.pq import TransactionStatus

from codity.db import migrate
from codity.db.embedded import EmbeddedServer
from tests.citus import CitusCluster, cluster_from_environment
from tests.fault_tasks import create_tables
from tests.ports import free_port
from tests.processes import Probe, Processes

TEMPLATE = f"codity_template_{os.getpid()}"
T = TypeVar("T")

_CLUSTER: CitusCluster | None = None
"""The session's Citus cluster, once a test has started one (CODITY_TEST_CITUS or -m citus)."""


def citus_cluster_started() -> CitusCluster:
    """The session's Citus cluster, started on first use and destroyed at exit."""
    global _CLUSTER
    if _CLUSTER is None:
        import atexit

        _CLUSTER = cluster_from_environment()
        atexit.register(_CLUSTER.destroy)
    return _CLUSTER


def _citus_mode() -> bool:
    return os.environ.get("CODITY_TEST_CITUS", "") not in {"", "0"}


def _with_database(url: str, name: str) -> str:
    """The same server URL with another database name (URLs only, as yoyo needs them)."""
    parts = urlsplit(url)
    if parts.scheme not in {"postgres", "postgresql", "postgresql+psycopg2"}:
        raise ValueError("CODITY_TEST_DATABASE_URL must be a postgresql:// URL")
    return urlunsplit(("postgresql", parts.netloc, f"/{name}", parts.query, ""))


# Markers whose tests run only when the -m expression names them (pyproject.toml).
_ONLY_WHEN_NAMED = ("docker", "failover")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``docker`` or ``failover`` run only when the ``-m`` expression names
    their marker (``./test -m docker``, ``./test -m failover``): they need root, set up
    system packages and take minutes, so ``-m ""`` (everything) and the fault commands'
    ``-m "" -k ...`` leave them out (deselected, never skipped)."""
    expression = config.getoption("markexpr") or ""
    unnamed = [marker for marker in _ONLY_WHEN_NAMED if marker not in expression]
    if not unnamed:
        return

    def left_out(item: pytest.Item) -> bool:
        return any(item.get_closest_marker(marker) is not None for marker in unnamed)

    dropped = [item for item in items if left_out(item)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if not left_out(item)]


@pytest.fixture(scope="session")
def pg_server_url() -> Iterator[str]:
    """A URL to the maintenance database of a server where we may create databases."""
    if _citus_mode():
        yield citus_cluster_started().url("postgres")
        return
    given = os.environ.get("CODITY_TEST_DATABASE_URL")
    if given:
        yield given
        return
    image = os.environ.get("CODITY_TEST_CONTAINER")
    if image:
        from testcontainers.community.postgres import PostgresContainer

        with PostgresContainer(image, driver=None) as container:
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
            # tests/test_health.py prepares a transaction to prove the check that finds one.
            "max_prepared_transactions=10",
        ],
    )
    server.start()
    try:
        yield server.url("postgres")
    finally:
        server.destroy()


@pytest.fixture(scope="session")
def template_url(pg_server_url: str) -> Iterator[str]:
    if _CLUSTER is not None and _citus_mode():
        url = _CLUSTER.create_database(TEMPLATE)
        migrate(url, citus=True)
    else:
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
    drop_database(pg_server_url, TEMPLATE)


def _cluster_of(pg_server_url: str) -> CitusCluster | None:
    """The Citus cluster whose coordinator ``pg_server_url`` names, if it is one."""
    if _CLUSTER is not None and urlsplit(pg_server_url).port == _CLUSTER.coordinator.port:
        return _CLUSTER
    return None


def clone_database(pg_server_url: str, template: str) -> tuple[str, str]:
    name = f"codity_t_{uuid.uuid4().hex[:12]}"
    cluster = _cluster_of(pg_server_url)
    if cluster is not None:
        # An empty database on a cluster still has Citus and its nodes.
        if template == "template0":
            return name, cluster.create_database(name)
        return name, cluster.clone(template, name)
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(template)
            )
        )
    return name, _with_database(pg_server_url, name)


def drop_database(pg_server_url: str, name: str) -> None:
    cluster = _cluster_of(pg_server_url)
    if cluster is not None:
        cluster.drop(name)
        return
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


@contextmanager
def cloned(pg_server_url: str, template: str = TEMPLATE) -> Iterator[str]:
    """A new database copied from ``template`` (a file copy), dropped when the block ends."""
    name, url = clone_database(pg_server_url, template)
    try:
        yield url
    finally:
        drop_database(pg_server_url, name)


@dataclass(frozen=True)
class WorldTemplate(Generic[T]):
    """A database built once to be cloned per test, and what its builder returned (ids)."""

    name: str
    url: str
    world: T


@contextmanager
def world_template(
    pg_server_url: str, build: Callable[[psycopg.Connection[Any]], T]
) -> Iterator[WorldTemplate[T]]:
    """Clone the migrated template, run ``build`` on it once (autocommit), and offer the result
    as a template of its own: a test then pays for a clone, not for building the world again.

    A module asks for it in a module-scoped fixture and overrides ``db_url`` to clone it
    (tests/test_web_isolation.py). No connection stays open on it, or the clone would fail.
    """
    name, url = clone_database(pg_server_url, TEMPLATE)
    try:
        with psycopg.connect(url, autocommit=True) as connection:
            world = build(connection)
        yield WorldTemplate(name, url, world)
    finally:
        drop_database(pg_server_url, name)


@pytest.fixture(scope="session")
def citus_cluster() -> CitusCluster:
    """The session's Citus cluster (a coordinator and two workers on loopback), started on
    first use: Citus is built once per machine (scripts/citus_build.sh), and a test fails
    with the build script's sentence when its source is missing; it never skips."""
    return citus_cluster_started()


@pytest.fixture(scope="session")
def citus_template(citus_cluster: CitusCluster) -> Iterator[str]:
    """The name of a database distributed by ``codity migrate --citus`` on every node."""
    name = f"codity_citus_template_{os.getpid()}"
    migrate(citus_cluster.create_database(name), citus=True)
    yield name
    citus_cluster.drop(name)


@pytest.fixture
def citus_db_url(citus_cluster: CitusCluster, citus_template: str) -> Iterator[str]:
    """The coordinator's URL of a distributed database of this test's own, a copy of
    ``citus_template`` on every node, dropped afterwards."""
    with citus_cluster.database(citus_template, f"codity_c_{uuid.uuid4().hex[:12]}") as url:
        yield url


@pytest.fixture
def db_url(pg_server_url: str, template_url: str) -> Iterator[str]:
    """A freshly migrated database of this test's own, dropped afterwards."""
    with cloned(pg_server_url) as url:
        yield url


@pytest.fixture
def conn(db_url: str) -> Iterator[psycopg.Connection]:
    """An autocommit connection to this test's database."""
    with psycopg.connect(db_url, autocommit=True) as connection:
        yield connection


@pytest.fixture(scope="session")
def shared_db_url(pg_server_url: str, template_url: str) -> Iterator[str]:
    """One clone of the template for the whole session that nothing ever commits to.

    Tests reach it through ``tx`` (every write rolled back) or read the catalogue in it
    (the generated reference); a test that commits takes ``db_url`` instead.
    """
    with cloned(pg_server_url) as url:
        yield url


@contextmanager
def rolled_back(url: str) -> Iterator[psycopg.Connection]:
    """A new connection inside one transaction that is rolled back at the end, whatever happens.

    ``commit()`` is refused inside it, and a nested ``with connection.transaction():`` is a
    savepoint, which is how a test that expects an error carries on after it.
    """
    with (
        psycopg.connect(url, autocommit=True) as connection,
        connection.transaction(force_rollback=True),
    ):
        yield connection
        # COMMIT sent as SQL would have ended the transaction and kept the test's rows.
        if connection.info.transaction_status == TransactionStatus.IDLE:
            raise AssertionError("a test committed inside its rolled-back transaction")


@pytest.fixture
def tx(shared_db_url: str) -> Iterator[psycopg.Connection]:
    """A connection inside a transaction rolled back at the end, on the shared database (River).

    About 1 ms instead of a clone's 50-100 ms, for a test that needs one connection and no
    commit. Not for a test that LISTENs or needs NOTIFY delivered, opens a second connection
    (or a login, the web app, a worker) that must see its rows, or needs ``now()`` to move
    (it is the transaction's start, frozen: pass ``p_now`` instead). Sequences are not rolled
    back, so ids are whatever they are: compare them with ids the test got, never with 1.
    An expected error aborts the transaction: wrap the failing call in
    ``with tx.transaction():`` (a savepoint) to carry on after it.
    """
    with rolled_back(shared_db_url) as connection:
        yield connection


@pytest.fixture
def probe(db_url: str) -> Iterator[Probe]:
    """A watcher of the fault tests' tables (tests/fault_tasks.py), on this test's database;
    the Citus fault tests bring their own, on the cluster."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        create_tables(conn)
    with Probe(db_url) as p:
        yield p


@pytest.fixture
def procs(tmp_path: Path, db_url: str) -> Iterator[Processes]:
    """Real ``codity`` processes on this test's database, stopped at the end."""
    with Processes(tmp_path, db_url) as processes:
        yield processes
