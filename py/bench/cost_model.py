"""``codity bench --cost-model``: what one job costs the database, from enqueue to completion,
in Codity and in the peers, measured record by record (issue 28, deliverable 3).

One PostgreSQL 18 server started for the run (the embedded binaries, durable commits,
``pg_stat_statements`` loaded), a scratch database per system, and per system three
phases, each between two readings of the WAL insert position:

    enqueue, one by one      each system's own client, a call and a commit per job
    enqueue, batched         the same client, 1,000 jobs per call
    drain                    the jobs of a batched enqueue, run by two worker processes
                             in the system's fastest configuration of ``--against``

For each phase, per job: the WAL written (full-page images apart), the statements the
system's processes sent (``pg_stat_statements``, top level; the bench reads and polls
under a login of its own, which is left out), and from the WAL itself
(codity.bench._wal_records): transactions that wrote, row versions written (inserted,
updated, updated in place, deleted, locked) and index entries added, in all and per
relation. A ``CHECKPOINT`` opens every phase, so each pays the full-page images of the
pages it is first to touch, as a system does once per checkpoint interval in production.

Graphile Worker and PGQueuer are installed as ``--against`` installs them; a peer that
cannot be installed is named in one sentence and the others still run.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

from codity.bench._against_model import CODITY, GRAPHILE, PGQUEUER, Config, DrainRun
from codity.bench._codity_runs import ENQUEUE_QUEUE, codity_drain
from codity.bench._cost_model import (
    BEST,
    DRAIN,
    ENQUEUE,
    ENQUEUE_BATCHED,
    OBSERVER,
    SETTINGS,
    CostOptions,
    CostReport,
    PhaseCost,
)
from codity.bench._cost_report import render_cost, write_cost
from codity.bench._graphile_runs import graphile_drain, graphile_enqueue, graphile_reset
from codity.bench._machine import describe_machine, load_average
from codity.bench._node_env import GRAPHILE_PEER, PeerUnavailable, ensure_node_peer
from codity.bench._node_runs import node_database
from codity.bench._pgq_env import ensure_peer_env, pgq_database
from codity.bench._pgq_runs import pgq_drain, pgq_enqueue, pgq_reset
from codity.bench._throughput import enqueue_batched, enqueue_one_by_one, queue_id, reset_jobs
from codity.bench._usage import counting_statements, postmaster_pid, read_usage, spent_since
from codity.bench._wal_records import read_span
from codity.bench._workers import BenchError
from codity.bench.against_pgqueuer import commit_of_checkout
from codity.bench.citus_cluster import free_port
from codity.db.embedded import EmbeddedServer, wheel_bin_dir
from codity.explain import scratch_database

__all__ = ["run_cost_model", "run_cost_model_command"]

log = logging.getLogger(__name__)

Conn = psycopg.Connection[Any]


def _as_user(url: str, user: str) -> str:
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, f"{user}@{host}", parts.path, parts.query, ""))


@dataclass(frozen=True, slots=True)
class _Side:
    system: str
    version: str
    observer: Conn
    enqueue: Callable[[int, int], object]
    reset: Callable[[], None]
    drain: Callable[[Config, int], DrainRun]


def _observe(stack: ExitStack, dsn: str) -> Conn:
    conn = stack.enter_context(psycopg.connect(_as_user(dsn, OBSERVER), autocommit=True))
    conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    return conn


def _codity(stack: ExitStack, url: str, work: Path) -> _Side:
    ours = stack.enter_context(scratch_database(url, "codity_cost"))
    client = stack.enter_context(psycopg.connect(ours, autocommit=True))
    observer = _observe(stack, ours)
    queue_id(client, ENQUEUE_QUEUE)  # created before the first phase is measured

    def enqueue(jobs: int, batch: int) -> object:
        if batch == 1:
            return enqueue_one_by_one(client, ENQUEUE_QUEUE, jobs)
        return enqueue_batched(client, ENQUEUE_QUEUE, jobs, batch)

    return _Side(
        CODITY, "", observer, enqueue=enqueue,
        reset=lambda: reset_jobs(observer),
        drain=lambda c, n: codity_drain(ours, observer, c, n, work),
    )  # fmt: skip


def _graphile(stack: ExitStack, url: str, home: Path) -> _Side:
    env = ensure_node_peer(home, GRAPHILE_PEER)
    dsn = stack.enter_context(node_database(url, env, "migrate"))
    observer = _observe(stack, dsn)
    return _Side(
        GRAPHILE, env.version, observer, enqueue=lambda n, b: graphile_enqueue(env, dsn, n, b),
        reset=lambda: graphile_reset(observer),
        drain=lambda c, n: graphile_drain(env, dsn, observer, c, n),
    )  # fmt: skip


def _pgqueuer(stack: ExitStack, url: str, home: Path, work: Path) -> _Side:
    pgq = ensure_peer_env(home, work)
    dsn = stack.enter_context(pgq_database(url, pgq))
    observer = _observe(stack, dsn)
    return _Side(
        PGQUEUER, pgq.version, observer, enqueue=lambda n, b: pgq_enqueue(pgq, dsn, n, b),
        reset=lambda: pgq_reset(observer), drain=lambda c, n: pgq_drain(pgq, dsn, observer, c, n),
    )  # fmt: skip


def _enqueue_phase(side: _Side, phase: str, jobs: int, batch: int) -> PhaseCost:
    side.reset()
    side.observer.execute("CHECKPOINT")
    postmaster = postmaster_pid(side.observer)
    before = read_usage(side.observer, postmaster)
    side.enqueue(jobs, batch)
    spent = spent_since(side.observer, before, postmaster)
    span = read_span(side.observer, spent.wal_window)
    return PhaseCost(side.system, phase, jobs, spent.wal_bytes, spent.statements, span)


def _drain_phase(side: _Side, jobs: int) -> PhaseCost:
    side.observer.execute("CHECKPOINT")
    config = BEST[side.system]
    run = side.drain(config, jobs)
    if run.wal_window is None:
        raise BenchError(f"{side.system}: the drain did not report its WAL window")
    span = read_span(side.observer, run.wal_window)
    return PhaseCost(side.system, DRAIN, jobs, run.wal_bytes, run.statements, span,
                     config=config.label)  # fmt: skip


def _start_server(home: Path) -> tuple[EmbeddedServer, str]:
    server = EmbeddedServer(home / "server", free_port(), bin_dir=wheel_bin_dir(),
                            settings=SETTINGS)  # fmt: skip
    server.start()
    url = server.url("postgres")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {OBSERVER} LOGIN SUPERUSER")
    return server, url


def run_cost_model(home: Path, options: CostOptions) -> CostReport:
    """Every system that can be installed, each phase once, on a server of the run's own."""
    load_before = load_average()
    commit = commit_of_checkout()
    started_at = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    began = time.monotonic()
    unavailable: list[tuple[str, str]] = []
    folder = Path(tempfile.mkdtemp(prefix="codity-cost-"))
    server: EmbeddedServer | None = None
    try:
        server, url = _start_server(folder)
        with ExitStack() as stack:
            work = folder / "work"
            work.mkdir()
            sides = [_codity(stack, url, work)]
            makers: dict[str, Callable[[], _Side]] = {
                GRAPHILE: lambda: _graphile(stack, url, home),
                PGQUEUER: lambda: _pgqueuer(stack, url, home, work),
            }
            for system, make in makers.items():
                try:
                    sides.append(make())
                except PeerUnavailable as exc:
                    log.warning("%s", exc)
                    unavailable.append((system, str(exc)))
            phases = []
            stack.enter_context(counting_statements())
            for side in sides:
                log.info("%s: %s, %d jobs", side.system, ENQUEUE, options.single)
                phases.append(_enqueue_phase(side, ENQUEUE, options.single, 1))
                log.info("%s: %s, %d jobs", side.system, ENQUEUE_BATCHED, options.jobs)
                phases.append(_enqueue_phase(side, ENQUEUE_BATCHED, options.jobs, 1_000))
                log.info("%s: %s, %d jobs", side.system, DRAIN, options.jobs)
                phases.append(_drain_phase(side, options.jobs))
            machine = describe_machine(sides[0].observer, load_before)
    finally:
        if server is not None:
            server.destroy()
        shutil.rmtree(folder, ignore_errors=True)
    return CostReport(
        options=options, phases=tuple(phases),
        versions=tuple((s.system, s.version) for s in sides[1:]),
        unavailable=tuple(unavailable), machine=machine, commit=commit,
        started_at=started_at, seconds=time.monotonic() - began,
    )  # fmt: skip


def run_cost_model_command(*, home: Path, quick: bool, jobs: int | None, write: bool) -> int:
    """``codity bench --cost-model``: measure, print, write docs/PERFORMANCE.md."""
    options = CostOptions.quick_defaults() if quick else CostOptions()
    if jobs is not None:
        if jobs < 1:
            raise BenchError("--jobs must be positive")
        options = CostOptions(jobs=jobs, single=min(options.single, jobs))
    command = "./codity bench --cost-model" + (" --quick" if quick else "")
    report = run_cost_model(home, options)
    print(render_cost(report, command))
    if write:
        print(f"\nwrote {write_cost(report, command)}")
    return 0
