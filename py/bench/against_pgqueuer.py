"""``codity bench --against pgqueuer``: Codity and PGQueuer side by side, in one run.

Issue 12 states its targets as ratios to PGQueuer measured in the same run, on the same
server, by the same method, because on these shared two-core machines an absolute figure
moves by a third from one minute to the next. So both systems run here, alternately, on
the PostgreSQL server of ``DATABASE_URL`` (else the embedded one), each in a scratch
database of its own that is dropped at the end::

    enqueue   each system's own client: one by one, then in batches of 1,000; per round
    pickup    one idle worker of each at its defaults, jobs enqueued one at a time
    drains    per round, every configuration once, the two systems alternating:
                PGQueuer  batch 10/25/50 x --max-concurrent-tasks 50/100, 100 x 200,
                          200 x 400; 1 and 2 processes
                Codity    concurrency 50/100/200/500, 1 and 2 processes
                defaults  each system's, 2 processes
    ceiling   per round, pgbench drains the same jobs through Codity's functions, a
              minimal UPDATE … SKIP LOCKED queue and a DELETE … RETURNING one
              (codity.bench._ceiling)

PGQueuer (1.6, with asyncpg) lives in a virtual environment of its own
(codity.bench._pgq_env), never among Codity's dependencies.
"""

from __future__ import annotations

import itertools
import logging
import subprocess
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import psycopg

from codity.bench._against_model import (
    CODITY,
    PGQUEUER,
    AgainstOptions,
    AgainstReport,
    Ceiling,
    Config,
    DrainRun,
    Series,
)
from codity.bench._against_report import render_against, write_against
from codity.bench._ceiling import CEILINGS, CLIENTS, ceiling_drain
from codity.bench._codity_runs import DEFAULT_CAPACITY, codity_drain, codity_enqueue, codity_pickup
from codity.bench._machine import describe_machine, load_average
from codity.bench._pgq_env import ensure_env, pgq_database
from codity.bench._pgq_runs import pgq_drain, pgq_enqueue, pgq_pickup, pgq_reset
from codity.bench._throughput import reset_jobs
from codity.bench._workers import BenchError
from codity.explain import scratch_database

__all__ = ["commit_of_checkout", "configurations", "run_against", "run_against_command"]

log = logging.getLogger(__name__)

PGQUEUER_DEFAULT_BATCH = 10
"""``pgq run``'s default --batch-size; its --max-concurrent-tasks is unlimited by default."""


def configurations(quick: bool) -> list[Config]:
    """The drains of one round, the two systems alternating, the defaults last."""
    if quick:
        pgq = [Config(PGQUEUER, p, 25, 50) for p in (1, 2)]
        codity = [Config(CODITY, p, 100) for p in (1, 2)]
    else:
        # PGQueuer refuses a --max-concurrent-tasks below twice the batch size. Past the
        # usual sizes (batch 10/25/50, max 50/100; concurrency 50/100) each system gets
        # larger steps, because both were still gaining at the edge of the small matrix.
        shapes = [(b, m) for b in (10, 25, 50) for m in (50, 100) if m >= 2 * b]
        shapes += [(100, 200), (200, 400)]
        pgq = [Config(PGQUEUER, p, b, m) for p in (1, 2) for b, m in shapes]
        codity = [Config(CODITY, p, c) for p in (1, 2) for c in (50, 100, 200, 500)]
    alternating = [c for pair in itertools.zip_longest(pgq, codity) for c in pair if c]
    return [*alternating, Config(CODITY, 2, DEFAULT_CAPACITY, default=True),
            Config(PGQUEUER, 2, PGQUEUER_DEFAULT_BATCH, default=True)]  # fmt: skip


def commit_of_checkout() -> str:
    """This checkout's commit, marked when tracked files differ from it."""
    root = Path(__file__).resolve().parents[2]

    def git(*args: str) -> str:
        run = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                             check=False)  # fmt: skip
        return run.stdout.strip() if run.returncode == 0 else ""

    head = git("rev-parse", "--short", "HEAD") or "unknown commit"
    return head + (", uncommitted changes" if git("status", "--porcelain", "-uno") else "")


def run_against(url: str, home: Path, options: AgainstOptions) -> AgainstReport:
    """Every measurement of both systems, in scratch databases on ``url``'s server."""
    load_before = load_average()
    commit = commit_of_checkout()  # now: the engine measured is the one migrated at the start
    started_at = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    began = time.monotonic()
    configs = configurations(options.quick)
    runs: dict[Config, list[DrainRun]] = {c: [] for c in configs}
    ceilings: dict[str, list[DrainRun]] = {name: [] for name in CEILINGS}
    with tempfile.TemporaryDirectory(prefix="codity-against-") as tmp:
        work = Path(tmp)
        pgq = ensure_env(home, work)
        with (
            scratch_database(url, "codity_bench_vs") as ours,
            pgq_database(url, pgq) as theirs,
            psycopg.connect(ours, autocommit=True) as oconn,
            psycopg.connect(theirs, autocommit=True) as tconn,
        ):
            enqueues = []
            sizes = ((1, options.enqueue_single), (options.enqueue_batch, options.enqueue_batched))
            for n, (batch, jobs) in itertools.product(range(options.rounds), sizes):
                log.info("round %d: enqueue %d jobs, %d per call", n + 1, jobs, batch)
                enqueues.append(codity_enqueue(oconn, jobs, batch))
                reset_jobs(oconn)
                enqueues.append(pgq_enqueue(pgq, theirs, jobs, batch))
                pgq_reset(tconn)
            log.info("pickup: %d jobs each", options.pickup_samples)
            pickups = (codity_pickup(ours, oconn, options.pickup_samples, work),
                       pgq_pickup(pgq, theirs, tconn, options.pickup_samples))  # fmt: skip
            for n, config in itertools.product(range(options.rounds), configs):
                log.info("round %d of %d: %s, %d process(es), %s", n + 1, options.rounds,
                         config.system, config.processes, config.label)  # fmt: skip
                if config.system == CODITY:
                    runs[config].append(codity_drain(ours, oconn, config, options.jobs, work))
                else:
                    runs[config].append(pgq_drain(pgq, theirs, tconn, config, options.jobs))
            for n, name in itertools.product(range(options.rounds), CEILINGS):
                log.info("round %d of %d: the ceiling, %s", n + 1, options.rounds, name)
                ceilings[name].append(ceiling_drain(ours, oconn, name, options.jobs, CLIENTS))
            machine = describe_machine(oconn, load_before)
    return AgainstReport(
        options=options, machine=machine, commit=commit, pgqueuer_version=pgq.version,
        series=tuple(Series(c, tuple(r)) for c, r in runs.items()), enqueues=tuple(enqueues),
        pickups=pickups, ceilings=tuple(Ceiling(n, tuple(r)) for n, r in ceilings.items()),
        started_at=started_at, seconds=time.monotonic() - began,
    )  # fmt: skip


def run_against_command(url: str, *, home: Path, quick: bool, jobs: int | None, write: bool) -> int:
    """``codity bench --against pgqueuer``: measure, print, write docs/PERFORMANCE.md."""
    options = AgainstOptions.quick_defaults() if quick else AgainstOptions()
    if jobs is not None:
        if jobs < 1:
            raise BenchError("--jobs must be positive")
        options = replace(options, jobs=jobs)
    report = run_against(url, home, options)
    print(render_against(report))
    if write:
        print(f"\nwrote {write_against(report)}")
    return 0
