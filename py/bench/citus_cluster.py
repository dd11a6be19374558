"""A real Citus cluster on loopback, for the tests (``-m citus``) and ``codity bench --citus``.

A coordinator and two workers (or more), each a PostgreSQL server of this machine.

Citus is built once per machine from ``../shared/vendor``'s upstream source against a copy
of the embedded PostgreSQL 18 (scripts/citus_build.sh, cached by the tarball's sha256), and
each node is an :class:`~codity.db.embedded.EmbeddedServer` of that copy with citus in
``shared_preload_libraries``. Where the source is missing, :func:`citus_bin_dir` raises
with a sentence saying where to get it: a Citus test fails then, it never skips. Codity
itself never ships Citus; users install it from Citus's own packages or images.

Databases: :meth:`CitusCluster.create_database` makes one on every node with the extension
and the workers registered; :meth:`CitusCluster.clone` copies a distributed database on
every node at once (``CREATE DATABASE ... TEMPLATE`` per node, the same name everywhere):
the coordinator's metadata names shards by id and nodes by address, so the copies make a
working distributed database of their own, about a second instead of a migrate and a
distribution. The template is closed to connections first, since Citus's maintenance
daemon and the nodes' cached connections would otherwise hold it open.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from codity.db.embedded import EmbeddedServer

__all__ = [
    "TEST_SETTINGS",
    "CitusCluster",
    "CitusUnavailable",
    "citus_bin_dir",
    "cluster_from_environment",
    "free_port",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "scripts" / "citus_build.sh"

# As the suite's own server: fast and throwaway (fsync off), plus what Citus needs.
TEST_SETTINGS = (
    "shared_preload_libraries=citus",
    "fsync=off",
    "synchronous_commit=off",
    "full_page_writes=off",
    "max_connections=300",
    # Two-phase commits of writes to reference tables and of multi-node transactions.
    "max_prepared_transactions=100",
    # Online shard moves and the rebalancer copy shards by logical replication.
    "wal_level=logical",
    "citus.log_distributed_deadlock_detection=off",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class CitusUnavailable(RuntimeError):
    """Citus could not be built here; the message says why and what to do."""


def citus_bin_dir() -> Path:
    """The bin/ folder of the cached PostgreSQL 18 with Citus, building it on first use
    (scripts/citus_build.sh of a checkout; an installed wheel has no build script)."""
    if not BUILD_SCRIPT.exists():
        raise CitusUnavailable(
            f"{BUILD_SCRIPT} is missing: the Citus cluster for tests and benchmarks is built"
            " from a checkout of Codity with Citus's source beside it (docs/TESTING.md)"
        )
    result = subprocess.run(
        ["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise CitusUnavailable(
            result.stderr.strip().splitlines()[-1]
            if result.stderr.strip()
            else f"{BUILD_SCRIPT} failed with exit code {result.returncode}"
        )
    return Path(result.stdout.strip().splitlines()[-1])


class CitusCluster:
    """A coordinator and ``workers`` worker nodes in one temporary folder."""

    def __init__(
        self,
        workers: int = 2,
        *,
        settings: Sequence[str] = TEST_SETTINGS,
        home: Path | None = None,
    ) -> None:
        self.bin_dir = citus_bin_dir()
        self.home = home or Path(tempfile.mkdtemp(prefix="codity-citus-"))
        self.settings = tuple(settings)
        self.coordinator = self._server("coordinator")
        self.workers = [self._server(f"worker{i + 1}") for i in range(workers)]

    def _server(self, name: str) -> EmbeddedServer:
        return EmbeddedServer(
            self.home / name, free_port(), bin_dir=self.bin_dir, settings=self.settings
        )

    @property
    def nodes(self) -> list[EmbeddedServer]:
        return [self.coordinator, *self.workers]

    def start(self) -> CitusCluster:
        for node in self.nodes:
            node.start()
        return self

    def destroy(self) -> None:
        for node in self.nodes:
            node.destroy()
        with contextlib.suppress(OSError):
            self.home.rmdir()

    def url(self, database: str) -> str:
        """The coordinator's URL for ``database``: where every Codity process connects."""
        return self.coordinator.url(database)

    # -- databases ---------------------------------------------------------

    def create_database(self, name: str) -> str:
        """A new database on every node, Citus created in each and the workers added."""
        for node in self.nodes:
            with psycopg.connect(node.url("postgres"), autocommit=True) as conn:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            with psycopg.connect(node.url(name), autocommit=True) as conn:
                conn.execute("CREATE EXTENSION citus")
        with psycopg.connect(self.url(name), autocommit=True) as conn:
            conn.execute(
                "SELECT citus_set_coordinator_host('127.0.0.1', %s)", [self.coordinator.port]
            )
            for worker in self.workers:
                conn.execute("SELECT citus_add_node('127.0.0.1', %s)", [worker.port])
        return self.url(name)

    def add_worker(self, database: str) -> EmbeddedServer:
        """Start one more worker node and create ``database``'s extension on it; the caller
        adds it to the cluster (citus_add_node) when the test wants it to."""
        node = self._server(f"worker{len(self.workers) + 1}")
        node.start()
        self.workers.append(node)
        with psycopg.connect(node.url("postgres"), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
        with psycopg.connect(node.url(database), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION citus")
        return node

    def _close(self, name: str) -> None:
        """No connection may stay on a template: refuse new ones and end the rest, on every
        node (the maintenance daemon and cached inter-node connections included)."""
        for node in self.nodes:
            with psycopg.connect(node.url("postgres"), autocommit=True) as conn:
                conn.execute(
                    sql.SQL("ALTER DATABASE {} WITH ALLOW_CONNECTIONS false").format(
                        sql.Identifier(name)
                    )
                )
                conn.execute(
                    "SELECT pg_catalog.pg_terminate_backend(pid)"
                    " FROM pg_catalog.pg_stat_activity"
                    " WHERE datname = %s AND pid <> pg_catalog.pg_backend_pid()",
                    [name],
                )

    def clone(self, template: str, name: str) -> str:
        """``name`` as a copy of the distributed database ``template`` on every node."""
        self._close(template)
        for node in self.nodes:
            with psycopg.connect(node.url("postgres"), autocommit=True) as conn:
                for attempt in range(50):
                    try:
                        conn.execute(
                            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                                sql.Identifier(name), sql.Identifier(template)
                            )
                        )
                        break
                    except psycopg.errors.ObjectInUse:
                        # A backend ended a moment ago may not have left yet.
                        if attempt == 49:
                            raise
                        conn.execute("SELECT pg_catalog.pg_sleep(0.1)")
                conn.execute(
                    sql.SQL("ALTER DATABASE {} WITH ALLOW_CONNECTIONS true").format(
                        sql.Identifier(name)
                    )
                )
        self.copy_database_settings(template, name)
        return self.url(name)

    def drop(self, name: str) -> None:
        """Drop ``name`` on every node. Connections are refused on all of them first: between
        nodes, Citus's maintenance daemon and cached connections would otherwise come back
        while a node's DROP ... WITH (FORCE) ends them."""
        for node in self.nodes:
            with psycopg.connect(node.url("postgres"), autocommit=True) as conn:
                if conn.execute(
                    "SELECT 1 FROM pg_catalog.pg_database WHERE datname = %s", [name]
                ).fetchone():
                    conn.execute(
                        sql.SQL("ALTER DATABASE {} WITH ALLOW_CONNECTIONS false").format(
                            sql.Identifier(name)
                        )
                    )
        for node in self.nodes:
            with psycopg.connect(node.url("postgres"), autocommit=True) as conn:
                for attempt in range(50):
                    try:
                        conn.execute(
                            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                                sql.Identifier(name)
                            )
                        )
                        break
                    except psycopg.errors.ObjectInUse:
                        if attempt == 49:
                            raise
                        conn.execute("SELECT pg_catalog.pg_sleep(0.1)")

    def copy_database_settings(self, template: str, name: str) -> None:
        """Give ``name`` the settings ``template`` has through ``ALTER DATABASE ... SET``
        (``codity migrate --citus`` sets ``citus.propagate_set_commands`` so), on every node:
        ``CREATE DATABASE ... TEMPLATE`` copies the files, not pg_db_role_setting, so a clone
        made by :meth:`clone` has none of them."""
        for node in self.nodes:
            with psycopg.connect(node.url("postgres"), autocommit=True) as conn:
                rows = conn.execute(
                    "SELECT pg_catalog.unnest(s.setconfig) FROM pg_catalog.pg_db_role_setting s"
                    " JOIN pg_catalog.pg_database d ON d.oid = s.setdatabase"
                    " WHERE d.datname = %s AND s.setrole = 0",
                    [template],
                ).fetchall()
                for (setting,) in rows:
                    key, _, value = str(setting).partition("=")
                    conn.execute(
                        sql.SQL("ALTER DATABASE {} SET {} = {}").format(
                            sql.Identifier(name),
                            sql.Identifier(*key.split(".")),
                            sql.Literal(value),
                        )
                    )

    # -- looking at and moving shards (the tests) --------------------------------

    def on_every_node(
        self, database: str, query: str, params: Sequence[object] = ()
    ) -> dict[int, list[tuple[Any, ...]]]:
        """The rows ``query`` returns on each node's copy of ``database`` (as the superuser,
        autocommit), by the node's port, the coordinator first."""
        rows: dict[int, list[tuple[Any, ...]]] = {}
        for node in self.nodes:
            with psycopg.connect(node.url(database), autocommit=True) as conn:
                cur = conn.execute(query, params or None)
                rows[node.port] = cur.fetchall() if cur.description else []
        return rows

    def node_port_of(self, database: str, table: str, value: object) -> int:
        """The port of the node holding the shard of the distributed ``table`` (e.g.
        ``codity.jobs``) where its distribution column is ``value`` (a queue id)."""
        with psycopg.connect(self.url(database), autocommit=True) as conn:
            row = conn.execute(
                "SELECT s.nodeport FROM pg_catalog.citus_shards s"
                " WHERE s.shardid = pg_catalog.get_shard_id_for_distribution_column(%s, %s)",
                [table, value],
            ).fetchone()
        if row is None:
            raise LookupError(f"no shard of {table} for {value!r} in {database}")
        return int(row[0])

    def move_shard(
        self,
        database: str,
        table: str,
        value: object,
        to_port: int,
        *,
        mode: str = "block_writes",
    ) -> int:
        """Move the shard of ``table`` holding ``value``, with every shard colocated with it
        (the queue's whole shard group), to the worker node on ``to_port``, through
        ``citus_move_shard_placement``; returns the shard id. ``mode`` is Citus's
        ``shard_transfer_mode``: ``block_writes`` (writes to the shards wait for the copy) or
        ``force_logical`` (copied by logical replication while writes go on, then a short
        block for the catch-up)."""
        from_port = self.node_port_of(database, table, value)
        with psycopg.connect(self.url(database), autocommit=True) as conn:
            row = conn.execute(
                "SELECT pg_catalog.get_shard_id_for_distribution_column(%s, %s)", [table, value]
            ).fetchone()
            assert row is not None
            shard = int(row[0])
            conn.execute(
                "SELECT pg_catalog.citus_move_shard_placement(%s, '127.0.0.1', %s,"
                " '127.0.0.1', %s, shard_transfer_mode => %s::citus.shard_transfer_mode)",
                [shard, from_port, to_port, mode],
            )
        return shard

    @contextlib.contextmanager
    def database(self, template: str, name: str) -> Iterator[str]:
        url = self.clone(template, name)
        try:
            yield url
        finally:
            self.drop(name)


def cluster_from_environment() -> CitusCluster:
    """A started cluster with CODITY_CITUS_WORKERS workers (2)."""
    workers = int(os.environ.get("CODITY_CITUS_WORKERS", "2"))
    return CitusCluster(workers).start()
