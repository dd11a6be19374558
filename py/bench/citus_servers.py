"""The servers ``codity bench --citus`` measures on: one plain PostgreSQL and a Citus cluster.

Both are started by the bench, from the same PostgreSQL 18 binaries (the embedded server's,
in the copy Citus is built against: codity.bench.citus_cluster), in one temporary folder,
with the same settings on every server: commits durable (``fsync``, ``synchronous_commit``
and ``full_page_writes`` on, as in production), and ``pg_stat_statements`` loaded with
``track = all`` everywhere, so that every statement the workers send, and every statement
run inside a function, is counted on the side that runs it. The cluster's nodes add Citus
and two of its diagnostics: ``citus.stat_statements_track = all`` (executor and partition
key per statement on the coordinator) and ``citus.multi_task_query_log_level = log``: Citus
writes "multi-task query about to be executed" to the node's log for every statement that
runs on more than one shard, from a client or from inside a function, on any node. That
line is the proof the drain is read for (codity.bench.citus_stats).

Everything is stopped and deleted on the way out, also on Ctrl-C and SIGTERM: the command
turns SIGTERM into KeyboardInterrupt while it runs, and the cleanup ignores a second
interrupt until it is done.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import signal
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import psycopg
from psycopg import sql

from codity.bench._workers import BenchError
from codity.bench.citus_cluster import CitusCluster, CitusUnavailable, free_port
from codity.db import migrate
from codity.db.embedded import EmbeddedServer
from codity.db.locate import SERVER_SETTINGS

__all__ = [
    "CLUSTER_SETTINGS",
    "DATABASE",
    "PLAIN_SETTINGS",
    "BenchServers",
    "Node",
    "interrupt_on_sigterm",
]

log = logging.getLogger(__name__)

DATABASE = "codity_bench"
_COMMON = (
    *SERVER_SETTINGS,
    "fsync=on",
    "synchronous_commit=on",
    "full_page_writes=on",
    "max_connections=300",
    # Citus's two-phase commits (reference tables, multi-node transactions); the same on
    # the plain server so that no setting differs.
    "max_prepared_transactions=100",
    "pg_stat_statements.track=all",
)
PLAIN_SETTINGS = ("shared_preload_libraries=pg_stat_statements", *_COMMON)
CLUSTER_SETTINGS = (
    "shared_preload_libraries=citus,pg_stat_statements",
    *_COMMON,
    "citus.stat_statements_track=all",
    "citus.multi_task_query_log_level=log",
)


@dataclass(frozen=True, slots=True)
class Node:
    """One server of a side: ``plain``, or ``coordinator``, ``worker1``, ``worker2``."""

    name: str
    server: EmbeddedServer

    def url(self, database: str = DATABASE) -> str:
        return self.server.url(database)

    @property
    def logfile(self) -> Path:
        return self.server.logfile

    @property
    def port(self) -> int:
        return self.server.port


class BenchServers:
    """The plain server and the cluster, started, each with a migrated database."""

    def __init__(self, workers: int = 2) -> None:
        self.home = Path(tempfile.mkdtemp(prefix="codity-bench-citus-"))
        self._workers = workers
        self._cluster: CitusCluster | None = None
        self._plain: EmbeddedServer | None = None

    @property
    def plain(self) -> list[Node]:
        assert self._plain is not None
        return [Node("plain", self._plain)]

    @property
    def cluster(self) -> list[Node]:
        """The coordinator first."""
        assert self._cluster is not None
        names = ["coordinator", *(f"worker{i + 1}" for i in range(len(self._cluster.workers)))]
        return [Node(n, s) for n, s in zip(names, self._cluster.nodes, strict=True)]

    def __enter__(self) -> BenchServers:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self) -> None:
        try:
            cluster = CitusCluster(
                self._workers, settings=CLUSTER_SETTINGS, home=self.home / "cluster"
            )
        except CitusUnavailable as exc:
            raise BenchError(f"no Citus to measure: {exc}") from exc
        self._cluster = cluster
        log.info("starting a Citus cluster (coordinator + %d workers) in %s", self._workers,
                 self.home)  # fmt: skip
        cluster.start()
        self._plain = EmbeddedServer(
            self.home / "plain", free_port(), bin_dir=cluster.bin_dir, settings=PLAIN_SETTINGS
        )
        self._plain.start()
        log.info("migrating the plain server, then the cluster (codity migrate --citus)")
        plain = self.plain[0]
        with psycopg.connect(plain.url("postgres"), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE)))
        _statements_extension(plain.url())
        migrate(plain.url())
        url = cluster.create_database(DATABASE)
        _statements_extension(url)  # propagated to the workers by Citus
        migrate(url, citus=True)

    def close(self) -> None:
        """Stop and delete every server; a Ctrl-C meanwhile waits until this is done."""
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            for server in [self._plain, *(self._cluster.nodes if self._cluster else [])]:
                if server is not None:
                    try:
                        server.destroy()
                    except Exception as exc:  # the others must still go
                        log.warning("could not stop the server in %s: %s", server.home, exc)
            shutil.rmtree(self.home, ignore_errors=True)
        finally:
            signal.signal(signal.SIGINT, previous)


def _statements_extension(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements WITH SCHEMA public")


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@contextlib.contextmanager
def interrupt_on_sigterm() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt meanwhile, so the servers are cleaned up as on Ctrl-C."""
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
