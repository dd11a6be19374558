"""``codity bench --citus``: Codity on a 3-node Citus cluster against plain PostgreSQL, one run.

Issue 24 states its targets as ratios to plain PostgreSQL 18 on the same machine, because
a cluster whose three nodes share this machine's two cores cannot beat one server here,
and because on these shared machines an absolute figure moves by a third from one minute
to the next. So the bench starts both itself (codity.bench.citus_servers: the same
binaries and settings everywhere, commits durable), and measures, in one run::

    drains   per round, plain then Citus: N jobs over 8 queues through W real
             `codity worker` processes (codity.bench.citus_drain), with each server's CPU,
             WAL and statements, and Citus's log of multi-shard statements
             (codity.bench.citus_stats); medians of the rounds, ratio per round
    pickup   per round, plain then Citus: jobs enqueued one at a time, 10-50 ms apart,
             to one idle worker listening (codity bench's own, codity.bench._latency)
    coverage one more drain on the cluster, not timed: the same jobs plus one per queue
             that fails (no handler; one attempt, so a dead letter), the workers
             heartbeating every 200 ms: the multi-shard proof over the whole hot path
             (claim and start, heartbeat, completion, failure)

It prints the tables, a scaling model drawn from the per-node figures, and rewrites its
section of docs/PERFORMANCE.md (codity.bench.citus_report) unless ``--no-write``. Every
server it started is stopped and deleted at the end, also on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import logging
import os
import platform
import subprocess
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from codity.bench._latency import pickup
from codity.bench._machine import SETTINGS, describe_machine, load_average
from codity.bench._model import BenchOptions, Pickup
from codity.bench._throughput import reset_jobs
from codity.bench._workers import BenchError
from codity.bench.citus_drain import drain, placements, queue_names
from codity.bench.citus_model import CITUS, PLAIN, CitusOptions, CitusReport, ServerInfo
from codity.bench.citus_report import render_citus, write_citus
from codity.bench.citus_servers import BenchServers, Node, interrupt_on_sigterm

__all__ = ["run_citus", "run_citus_command"]

log = logging.getLogger(__name__)

Conn = psycopg.Connection[Any]
COVERAGE_HEARTBEAT_MS = 200
"""The coverage drain's WORKER_HEARTBEAT_MS: several heartbeats of each worker fall in its
window, so the multi-shard proof covers the heartbeat as well as claims, completions and
failures (at the default, 5 s, a drain of a few seconds may hold none)."""
_SHOWN = (*SETTINGS, "max_prepared_transactions", "shared_preload_libraries",
          "pg_stat_statements.track", "citus.stat_statements_track",
          "citus.multi_task_query_log_level")  # fmt: skip


def _commit() -> str:
    """This checkout's commit, marked when tracked files differ from it."""
    root = Path(__file__).resolve().parents[2]

    def git(*args: str) -> str:
        run = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                             check=False)  # fmt: skip
        return run.stdout.strip() if run.returncode == 0 else ""

    head = git("rev-parse", "--short", "HEAD") or "unknown commit"
    return head + (", uncommitted changes" if git("status", "--porcelain", "-uno") else "")


def _server_info(node: Node, conn: Conn) -> ServerInfo:
    version = str(conn.execute("SELECT pg_catalog.version()").fetchall()[0][0])
    settings = []
    for name in _SHOWN:
        row = conn.execute("SELECT pg_catalog.current_setting(%s, true)", [name]).fetchone()
        if row is not None and row[0] is not None:
            settings.append((name, str(row[0])))
    return ServerInfo(node.name, version, tuple(settings))


def _pickup(url: str, conn: Conn, options: CitusOptions, samples: int, work: Path) -> Pickup:
    reset_jobs(conn)
    bench = replace(BenchOptions(), concurrency=options.concurrency, pickup_samples=samples)
    return pickup(url, conn, bench, listen=True, log_dir=work)


def _merge(found: list[Pickup]) -> Pickup:
    """The rounds' samples together, each round's first left out: a worker just started
    pays for its first claim what a running one does not (on the cluster the coordinator's
    new session opens its connection to the node: 16-25 ms against 5 ms on one server in a
    trial), so one in forty samples would decide the p99. They are reported apart."""
    return Pickup(
        listen=True,
        synchronous_commit=True,
        samples_ms=tuple(s for p in found for s in p.samples_ms[1:]),
        wake_ms=tuple(s for p in found for s in p.wake_ms[1:]),
        commit_ms=tuple(s for p in found for s in p.commit_ms[1:]),
    )


def run_citus(options: CitusOptions, command: str) -> CitusReport:
    """Every measurement on both sides, alternating, on servers started for the run."""
    load_before = load_average()
    commit = _commit()
    started_at = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    began = time.monotonic()
    queues = queue_names(options.queues)
    # One more per round: the first job of each round's fresh worker is reported apart.
    samples = [options.pickup_samples // options.rounds + 1] * options.rounds
    samples[0] += options.pickup_samples + options.rounds - sum(samples)
    with (
        interrupt_on_sigterm(),
        BenchServers() as servers,
        tempfile.TemporaryDirectory(prefix="codity-bench-citus-") as tmp,
    ):
        work = Path(tmp)
        sides = {PLAIN: servers.plain, CITUS: servers.cluster}
        conns: dict[str, Conn] = {}
        try:
            for node in [*servers.plain, *servers.cluster]:
                conns[node.name] = psycopg.connect(node.url(), autocommit=True)
            where = placements(conns["coordinator"], servers.cluster, queues)
            drains = []
            found: dict[str, list[Pickup]] = {PLAIN: [], CITUS: []}
            for n in range(options.rounds):
                for side, nodes in sides.items():
                    log.info("round %d of %d: %s, drain of %d jobs over %d queues, %d x %d",
                             n + 1, options.rounds, side, options.total_jobs, options.queues,
                             options.workers, options.concurrency)  # fmt: skip
                    drains.append(drain(side, n + 1, nodes, conns, options, log_dir=work))
                for side, nodes in sides.items():
                    log.info("round %d of %d: %s, pickup of %d jobs", n + 1, options.rounds,
                             side, samples[n])  # fmt: skip
                    entry = nodes[0]
                    found[side].append(
                        _pickup(entry.url(), conns[entry.name], options, samples[n], work)
                    )
            log.info("coverage drain on the cluster: %d failing jobs, heartbeats every %d ms",
                     options.queues, COVERAGE_HEARTBEAT_MS)  # fmt: skip
            coverage = drain(CITUS, 0, servers.cluster, conns, options, log_dir=work,
                             failing=options.queues,
                             env={"WORKER_HEARTBEAT_MS": str(COVERAGE_HEARTBEAT_MS)})  # fmt: skip
            machine = describe_machine(conns["plain"], load_before)
            servers_info = tuple(
                _server_info(node, conns[node.name]) for node in [*servers.plain,
                                                                  *servers.cluster]
            )  # fmt: skip
            row = conns["coordinator"].execute("SELECT pg_catalog.citus_version()").fetchone()
            # "Citus 14.0.1 on x86_64-pc-linux-gnu, compiled by ...": the version alone.
            citus_version = str(row[0]).split(" on ")[0].removeprefix("Citus ") if row else "?"
        finally:
            for conn in conns.values():
                conn.close()
    return CitusReport(
        options=options, drains=tuple(drains),
        pickups={side: _merge(p) for side, p in found.items()},
        first_pickups={side: tuple(p.samples_ms[0] for p in f) for side, f in found.items()},
        coverage=coverage,
        placements=where,
        servers=servers_info, citus_version=citus_version, cpus=machine.cpus,
        cpu_model=machine.cpu_model, memory_gib=machine.memory_gib, load_before=load_before,
        load_after=load_average(),
        python=f"{platform.python_implementation()} {platform.python_version()}, "
        f"psycopg {psycopg.__version__}",
        commit=commit, command=command, started_at=started_at,
        seconds=time.monotonic() - began,
    )  # fmt: skip


def run_citus_command(
    *,
    quick: bool,
    jobs: int | None,
    workers: int | None,
    concurrency: int | None,
    write: bool,
    command: str,
) -> int:
    """``codity bench --citus``: measure, print, write docs/PERFORMANCE.md's section."""
    options = CitusOptions.quick_defaults() if quick else CitusOptions()
    options = replace(
        options,
        jobs=options.jobs if jobs is None else jobs,
        workers=options.workers if workers is None else workers,
        concurrency=options.concurrency if concurrency is None else concurrency,
    )
    if min(options.jobs, options.workers) < 1 or not 1 <= options.concurrency <= 1000:
        raise BenchError(
            "--workers and --jobs must be positive; --concurrency from 1 to 1000 (claim's limit)"
        )
    if os.environ.get("DATABASE_URL"):
        log.info("bench --citus starts servers of its own: DATABASE_URL is not used")
    report = run_citus(options, command)
    print(render_citus(report))
    if write:
        print(f"\nwrote {write_citus(report)}")
    return 0
