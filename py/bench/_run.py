"""One run of every measurement, in a scratch database; and the ``codity bench`` command."""

from __future__ import annotations

import logging
import os
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import psycopg

from codity.bench._claim import claim_costs
from codity.bench._latency import pickup
from codity.bench._machine import describe_machine, load_average
from codity.bench._model import BenchOptions, Report
from codity.bench._report import render_table, render_targets, write_performance
from codity.bench._throughput import (
    CLIENTS_PER_WORKER,
    ceiling,
    drain,
    enqueue_batched,
    enqueue_one_by_one,
    queue_id,
    reset_jobs,
)
from codity.bench._worker_loop import pgbench_path
from codity.bench._workers import BenchError
from codity.explain import scratch_database

__all__ = ["pgbench_path", "run_bench", "run_command"]

log = logging.getLogger(__name__)

ENQUEUE_QUEUE = "enqueue"


def run_bench(url: str, options: BenchOptions, pgbench: Path) -> Report:
    """Run every measurement in a scratch database on ``url``'s server."""
    load_before = load_average()
    started_at = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    began = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="codity-bench-") as tmp,
        scratch_database(url, "codity_bench") as scratch,
        psycopg.connect(scratch, autocommit=True) as conn,
    ):
        work = Path(tmp)
        queue_id(conn, ENQUEUE_QUEUE)
        log.info("enqueue: %d one by one, %d batched", options.enqueue_single,
                 options.enqueue_batched)  # fmt: skip
        single = enqueue_one_by_one(conn, ENQUEUE_QUEUE, options.enqueue_single)
        batched = enqueue_batched(
            conn, ENQUEUE_QUEUE, options.enqueue_batched, options.enqueue_batch
        )
        reset_jobs(conn)
        log.info("pickup latency: %d jobs with NOTIFY, polling, NOTIFY unflushed",
                 options.pickup_samples)  # fmt: skip
        notify = pickup(scratch, conn, options, listen=True, log_dir=work)
        poll = pickup(scratch, conn, options, listen=False, log_dir=work)
        unflushed = pickup(
            scratch, conn, options, listen=True, log_dir=work, synchronous_commit=False
        )
        drains, ceilings = [], []
        clients = CLIENTS_PER_WORKER * options.workers
        for n in range(options.rounds):
            log.info("round %d of %d: raw-SQL ceiling (pgbench, %d clients), then drain "
                     "(%d jobs, %d workers x %d)", n + 1, options.rounds, clients,
                     options.jobs, options.workers, options.concurrency)  # fmt: skip
            ceilings.append(ceiling(conn, scratch, options, pgbench, work, clients))
            drains.append(drain(scratch, conn, options, work))
        log.info("claim cost: %d and %d jobs queued", *options.claim_sizes)
        small, large = claim_costs(conn, options.claim_sizes, options.claim_runs)
        machine = describe_machine(conn, load_before)
    return Report(
        options=options, machine=machine, enqueue_single=single, enqueue_batched=batched,
        pickup_notify=notify, pickup_poll=poll, pickup_unflushed=unflushed,
        drains=tuple(drains), ceilings=tuple(ceilings),
        ceiling_clients=CLIENTS_PER_WORKER * options.workers, claim_small=small, claim_large=large,
        started_at=started_at, seconds=time.monotonic() - began,
    )  # fmt: skip


def run_command(
    url: str,
    *,
    pg_bin: Path | None,
    quick: bool,
    workers: int | None,
    concurrency: int | None,
    jobs: int | None,
    write: bool,
) -> int:
    """``codity bench``: measure, print the table, write docs/PERFORMANCE.md unless told not to."""
    base = BenchOptions.quick_defaults() if quick else BenchOptions()
    poll = os.environ.get("WORKER_POLL_INTERVAL_MS") or "5000"
    if not poll.isdigit() or int(poll) == 0:
        raise BenchError(f"WORKER_POLL_INTERVAL_MS must be a positive whole number, got {poll!r}")
    options = replace(
        base,
        workers=base.workers if workers is None else workers,
        concurrency=base.concurrency if concurrency is None else concurrency,
        jobs=base.jobs if jobs is None else jobs,
        poll_interval_ms=int(poll),
    )
    if min(options.workers, options.jobs) < 1 or not 1 <= options.concurrency <= 1000:
        raise BenchError(
            "--workers and --jobs must be positive; --concurrency from 1 to 1000 (claim's limit)"
        )
    report = run_bench(url, options, pgbench_path(pg_bin))
    print(render_table(report))
    print()
    print(render_targets(report))
    if write:
        print(f"\nwrote {write_performance(report)}")
    return 0
