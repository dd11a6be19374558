"""``codity bench --against graphile-worker|pg-boss|all``: Codity beside the peers users
compare it with, in one run (issue 28).

The method is ``--against pgqueuer``'s (codity.bench.against_pgqueuer), applied to every
system asked for: all of them on the PostgreSQL server of ``DATABASE_URL`` (else the
embedded one), each in a scratch database of its own dropped at the end, alternating::

    enqueue   each system's own client: one by one, then in batches of 1,000; per round
    pickup    one idle worker of each at its defaults, jobs enqueued one at a time
    drains    per round, every configuration once, the systems alternating:
                Codity           concurrency 50/100/200/500, 1 and 2 processes
                PGQueuer         (``all`` only) its matrix of ``--against pgqueuer``
                Graphile Worker  its documented fastest shape (local queue of 500, batched
                                 completion) at concurrency 8/24/64, 1 and 2 processes
                pg-boss          batchSize 500/1000 with 4 or 8 work() loops, polling every
                                 0.5 s (the least it accepts), 1 and 2 processes
                defaults         each system's, 2 processes

Graphile Worker 0.17 and pg-boss 10 (the newest that run on Node 20) are installed with
npm into the bench's own space (codity.bench._node_env), PGQueuer into its own virtual
environment; none is ever Codity's dependency. A peer that cannot be installed is named in
the report in one sentence, and the others still run. The ceiling of ``--against
pgqueuer`` (pgbench on Codity's functions) is that command's, not this one's.
"""

from __future__ import annotations

import itertools
import logging
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from codity.bench._against_model import (
    CODITY,
    GRAPHILE,
    PGBOSS,
    PGQUEUER,
    AgainstOptions,
    Config,
    DrainRun,
    EnqueueRun,
    PickupRun,
    Series,
)
from codity.bench._boss_runs import boss_drain, boss_enqueue, boss_pickup, boss_reset
from codity.bench._codity_runs import codity_drain, codity_enqueue, codity_pickup
from codity.bench._graphile_runs import (
    GRAPHILE_DOCUMENTED,
    graphile_drain,
    graphile_enqueue,
    graphile_pickup,
    graphile_reset,
)
from codity.bench._machine import describe_machine, load_average
from codity.bench._node_env import GRAPHILE_PEER, PGBOSS_PEER, PeerUnavailable, ensure_node_peer
from codity.bench._node_runs import node_database
from codity.bench._peers_model import PeersReport
from codity.bench._peers_report import render_peers, write_peers
from codity.bench._pgq_env import ensure_peer_env, pgq_database
from codity.bench._pgq_runs import pgq_drain, pgq_enqueue, pgq_pickup, pgq_reset
from codity.bench._throughput import reset_jobs
from codity.bench._workers import BenchError
from codity.bench.against_pgqueuer import commit_of_checkout, configurations
from codity.explain import scratch_database

__all__ = ["PEERS", "peer_configurations", "run_peers", "run_peers_command"]

log = logging.getLogger(__name__)

PEERS = {"pgqueuer": PGQUEUER, "graphile-worker": GRAPHILE, "pg-boss": PGBOSS}
"""``--against`` names of the peers this command runs; ``all`` is every one."""
GRAPHILE_DEFAULT_CONCURRENCY = 1
PGBOSS_DEFAULT_BATCH = 1


def peer_configurations(system: str, quick: bool) -> list[Config]:
    """One system's drains of a round, its defaults last."""
    if system in (CODITY, PGQUEUER):
        return [c for c in configurations(quick) if c.system == system]
    processes = (1, 2)
    if system == GRAPHILE:
        concurrency, local_queue = GRAPHILE_DOCUMENTED
        shapes = [(concurrency, local_queue)] if quick else [(c, local_queue) for c in (8, 24, 64)]
        default = Config(GRAPHILE, 2, GRAPHILE_DEFAULT_CONCURRENCY, default=True)
    elif system == PGBOSS:
        shapes = [(500, 4)] if quick else [(500, 4), (1000, 4), (1000, 8)]
        default = Config(PGBOSS, 2, PGBOSS_DEFAULT_BATCH, 1, default=True)
    else:
        raise BenchError(f"no peer called {system!r}")
    return [*(Config(system, p, b, m) for p in processes for b, m in shapes), default]


@dataclass(frozen=True, slots=True)
class Side:
    """One system as the run drives it: its scratch database, its client, its workers."""

    system: str
    version: str
    enqueue: Callable[[int, int], EnqueueRun]
    reset: Callable[[], None]
    pickup: Callable[[int], PickupRun]
    drain: Callable[[Config, int], DrainRun]


Conn = psycopg.Connection[Any]


def _codity(stack: ExitStack, url: str, work: Path) -> tuple[Side, Conn]:
    ours = stack.enter_context(scratch_database(url, "codity_bench_vs"))
    conn = stack.enter_context(psycopg.connect(ours, autocommit=True))
    side = Side(
        CODITY, "", enqueue=lambda n, b: codity_enqueue(conn, n, b),
        reset=lambda: reset_jobs(conn),
        pickup=lambda n: codity_pickup(ours, conn, n, work),
        drain=lambda c, n: codity_drain(ours, conn, c, n, work),
    )  # fmt: skip
    return side, conn


def _pgqueuer(stack: ExitStack, url: str, home: Path, work: Path) -> Side:
    pgq = ensure_peer_env(home, work)
    dsn = stack.enter_context(pgq_database(url, pgq))
    conn = stack.enter_context(psycopg.connect(dsn, autocommit=True))
    return Side(
        PGQUEUER, pgq.version, enqueue=lambda n, b: pgq_enqueue(pgq, dsn, n, b),
        reset=lambda: pgq_reset(conn), pickup=lambda n: pgq_pickup(pgq, dsn, conn, n),
        drain=lambda c, n: pgq_drain(pgq, dsn, conn, c, n),
    )  # fmt: skip


def _graphile(stack: ExitStack, url: str, home: Path) -> Side:
    env = ensure_node_peer(home, GRAPHILE_PEER)
    dsn = stack.enter_context(node_database(url, env, "migrate"))
    conn = stack.enter_context(psycopg.connect(dsn, autocommit=True))
    return Side(
        GRAPHILE, env.version, enqueue=lambda n, b: graphile_enqueue(env, dsn, n, b),
        reset=lambda: graphile_reset(conn), pickup=lambda n: graphile_pickup(env, dsn, conn, n),
        drain=lambda c, n: graphile_drain(env, dsn, conn, c, n),
    )  # fmt: skip


def _pgboss(stack: ExitStack, url: str, home: Path) -> Side:
    env = ensure_node_peer(home, PGBOSS_PEER)
    dsn = stack.enter_context(node_database(url, env, "install"))
    conn = stack.enter_context(psycopg.connect(dsn, autocommit=True))
    return Side(
        PGBOSS, env.version, enqueue=lambda n, b: boss_enqueue(env, dsn, n, b),
        reset=lambda: boss_reset(conn), pickup=lambda n: boss_pickup(env, dsn, conn, n),
        drain=lambda c, n: boss_drain(env, dsn, conn, c, n),
    )  # fmt: skip


def _rounds(sides: list[Side], quick: bool) -> list[Config]:
    """One round's drains: the systems' own configurations alternating, the defaults last."""
    own = [peer_configurations(s.system, quick) for s in sides]
    tuned = [[c for c in configs if not c.default] for configs in own]
    alternating = [c for group in itertools.zip_longest(*tuned) for c in group if c]
    return [*alternating, *(c for configs in own for c in configs if c.default)]


def run_peers(url: str, home: Path, options: AgainstOptions, systems: tuple[str, ...]
              ) -> PeersReport:  # fmt: skip
    """Codity and every peer of ``systems`` that can be installed, measured side by side."""
    load_before = load_average()
    commit = commit_of_checkout()
    started_at = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    began = time.monotonic()
    unavailable: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory(prefix="codity-against-") as tmp, ExitStack() as stack:
        work = Path(tmp)
        codity, conn = _codity(stack, url, work)
        sides = [codity]
        makers: dict[str, Callable[[], Side]] = {
            PGQUEUER: lambda: _pgqueuer(stack, url, home, work),
            GRAPHILE: lambda: _graphile(stack, url, home),
            PGBOSS: lambda: _pgboss(stack, url, home),
        }
        for system in systems:
            try:
                sides.append(makers[system]())
            except PeerUnavailable as exc:
                log.warning("%s", exc)
                unavailable.append((system, str(exc)))
        enqueues = []
        sizes = ((1, options.enqueue_single), (options.enqueue_batch, options.enqueue_batched))
        for n, (batch, jobs), side in itertools.product(range(options.rounds), sizes, sides):
            log.info("round %d: %s enqueues %d jobs, %d per call", n + 1, side.system, jobs, batch)
            enqueues.append(side.enqueue(jobs, batch))
            side.reset()
        pickups = []
        for side in sides:
            log.info("pickup: %s, %d jobs", side.system, options.pickup_samples)
            pickups.append(side.pickup(options.pickup_samples))
        configs = _rounds(sides, options.quick)
        by_system = {s.system: s for s in sides}
        runs: dict[Config, list[DrainRun]] = {c: [] for c in configs}
        for n, config in itertools.product(range(options.rounds), configs):
            log.info("round %d of %d: %s, %d process(es), %s", n + 1, options.rounds,
                     config.system, config.processes, config.label)  # fmt: skip
            runs[config].append(by_system[config.system].drain(config, options.jobs))
        machine = describe_machine(conn, load_before)
    return PeersReport(
        options=options, machine=machine, commit=commit,
        versions=tuple((s.system, s.version) for s in sides[1:]),
        unavailable=tuple(unavailable),
        series=tuple(Series(c, tuple(r)) for c, r in runs.items()), enqueues=tuple(enqueues),
        pickups=tuple(pickups), started_at=started_at, seconds=time.monotonic() - began,
    )  # fmt: skip


def run_peers_command(url: str, *, home: Path, against: str, quick: bool, jobs: int | None,
                      write: bool) -> int:  # fmt: skip
    """``codity bench --against graphile-worker|pg-boss|all``: measure, print, write
    docs/PERFORMANCE.md."""
    systems = tuple(PEERS.values()) if against == "all" else (PEERS[against],)
    options = AgainstOptions.quick_defaults() if quick else AgainstOptions()
    if jobs is not None:
        if jobs < 1:
            raise BenchError("--jobs must be positive")
        options = replace(options, jobs=jobs)
    report = run_peers(url, home, options, systems)
    print(render_peers(report, command=f"./codity bench --against {against}"))
    if write:
        print(f"\nwrote {write_peers(report, command=f'./codity bench --against {against}')}")
    return 0
