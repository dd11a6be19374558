"""``codity soak``: a long run at a steady rate with pruning on, to show that retention keeps
the tables, the claim and the throughput steady (issue 13). A command, not a test: it takes
minutes and its figures belong in docs/PERFORMANCE.md, not in an assertion.

Everything happens in a scratch database on the target server (codity.explain), dropped
at the end::

    rate      unless --rate is given: one drain of 20,000 no-op jobs as ``codity bench
              --against`` measures it (codity.bench._codity_runs); the soak offers half
    soak      queue ``soak`` keeping completed jobs --keep seconds; W real ``codity worker``
              processes; the scheduler's own loop (codity.scheduler.run_scheduler: tick,
              then prune, every second) in a thread; a producer thread enqueueing
              rate/10 jobs every 100 ms with codity.enqueue_many
    samples   every --sample seconds one row, printed as it is taken
    end       producer stopped, backlog drained, scheduler and workers stopped, counted

A row's counts come from one snapshot taken while the producer is held between two calls,
so "pruned" (enqueued minus the jobs left: only prune deletes jobs here) is exact.
Completions per second count the completed executions whose finished_at falls in the
window; pruning never reaches them before the next sample, since --sample < --keep. Claim
cost is ``codity.claim(probe, 'soak', 10)`` timed inside the server, rolled back, median
of 20 calls after three warm-up ones; at half rate the queue is nearly empty, so it
measures what the claim index costs to search, whatever it returns.

Verdicts: the last window's throughput within 10 % of the first's; each size at the end
at most 10 % above the largest seen in the first half of the windows (judged when that half
reaches one keep period plus pruning's lag), so a table still growing in the second half
fails; claim
cost over the last third of the windows at most 1.5x that over the first third (medians of
the windows' medians); and every job enqueued completed exactly once
(each job's execution_seq, the claim counter, is 1 at every sample, and the jobs left
each hold one completed execution).
"""

from __future__ import annotations

import logging
import statistics
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg

from codity.bench._against_model import CODITY, Config
from codity.bench._claim import TIMED_CLAIM
from codity.bench._codity_runs import codity_drain
from codity.bench._machine import describe_machine, load_average
from codity.bench._soak_report import (
    HEADER,
    Outcome,
    Sample,
    SoakOptions,
    SoakReport,
    render_machine,
    render_verdicts,
    row,
    verdicts,
)  # fmt: skip
from codity.bench._throughput import enqueue_batched, reset_jobs
from codity.bench._usage import Usage, postmaster_pid, read_usage
from codity.bench._workers import BenchError, WorkerProcesses
from codity.explain import scratch_database
from codity.scheduler import run_scheduler

__all__ = ["SoakOptions", "SoakReport", "run_soak", "run_soak_command"]

log = logging.getLogger(__name__)

Conn = psycopg.Connection[Any]
QUEUE = "soak"
TICK_MS = 1000
STEP_S = 0.1
"""The producer's clock: rate/10 jobs every 100 ms."""
MAX_BATCH = 1000
MEASURE_JOBS = 20_000
CLAIM_LIMIT, CLAIM_SAMPLES, CLAIM_WARMUP = 10, 20, 3
DRAIN_TIMEOUT_S = 120

_SNAPSHOT = """
SELECT (SELECT count(*) FROM codity.job_executions x
        WHERE x.queue_id = %(q)s AND x.status = 'completed'
          AND x.finished_at > %(since)s AND x.finished_at <= %(until)s),
       (SELECT count(*) FROM codity.jobs j WHERE j.queue_id = %(q)s AND j.status = 'queued'),
       (SELECT count(*) FROM codity.jobs),
       (SELECT count(*) FROM codity.job_executions),
       pg_catalog.pg_total_relation_size('codity.jobs'),
       pg_catalog.pg_total_relation_size('codity.job_executions'),
       pg_catalog.pg_relation_size('codity.jobs_claim_idx'),
       pg_catalog.pg_indexes_size('codity.jobs'),
       ARRAY(SELECT j.id FROM codity.jobs j WHERE j.queue_id = %(q)s AND j.execution_seq > 1),
       (SELECT s.autovacuum_count FROM pg_catalog.pg_stat_user_tables s
        WHERE s.relid = 'codity.jobs'::regclass)
"""
_UNFINISHED = "SELECT count(*) FROM codity.jobs j WHERE j.queue_id = %s AND j.finished_at IS NULL"
_LEFT = """
SELECT count(*), count(*) FILTER (WHERE j.status = 'completed'),
       (SELECT count(*) FROM codity.job_executions x WHERE x.queue_id = %(q)s),
       (SELECT count(*) FROM codity.job_executions x
        WHERE x.queue_id = %(q)s AND x.status = 'completed'),
       ARRAY(SELECT j.id FROM codity.jobs j WHERE j.queue_id = %(q)s AND j.execution_seq > 1)
FROM codity.jobs j WHERE j.queue_id = %(q)s
"""


class _Producer(threading.Thread):
    """Enqueues on a steady clock: every 100 ms whatever the schedule says is due by then,
    so a late step catches up and none runs ahead. ``lock`` is held around each call, so a
    reader holding it sees ``enqueued`` match what is committed."""

    def __init__(self, url: str, rate: float) -> None:
        super().__init__(name="codity-soak-producer", daemon=True)
        self.url, self.rate = url, rate
        self.lock = threading.Lock()
        self.enqueued = 0
        self.error: BaseException | None = None
        self.halt = threading.Event()

    def run(self) -> None:
        try:
            with psycopg.connect(self.url, autocommit=True,
                                 application_name="codity-soak-producer") as conn:  # fmt: skip
                start, step = time.monotonic(), 0
                while not self.halt.is_set():
                    due = int(self.rate * (time.monotonic() - start)) - self.enqueued
                    while due > 0 and not self.halt.is_set():
                        size = min(due, MAX_BATCH)
                        with self.lock:
                            enqueue_batched(conn, QUEUE, size, size)
                            self.enqueued += size
                        due -= size
                    step += 1
                    self.halt.wait(max(0.0, start + step * STEP_S - time.monotonic()))
        except BaseException as exc:  # reported by the main thread at its next check
            self.error = exc


class _Scheduler(threading.Thread):
    """codity.scheduler.run_scheduler as ``codity scheduler`` runs it, ticking every second."""

    def __init__(self, url: str) -> None:
        super().__init__(name="codity-soak-scheduler", daemon=True)
        self.url = url
        self.halt = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            run_scheduler(self.url, TICK_MS, self.halt)
        except BaseException as exc:
            self.error = exc


def _check(workers: WorkerProcesses, *threads: _Producer | _Scheduler) -> None:
    workers.check_alive()
    for thread in threads:
        if thread.error is not None:
            raise BenchError(f"{thread.name} failed: {thread.error!r}") from thread.error
        if not thread.is_alive():
            raise BenchError(f"{thread.name} stopped early")


def _claim_ms(conn: Conn, probe: int) -> float:
    conn.execute("SELECT count(*) FROM codity.heartbeat(%s)", [probe])  # the sweep may have run
    samples = []
    for n in range(CLAIM_WARMUP + CLAIM_SAMPLES):
        with conn.transaction(force_rollback=True):
            row = conn.execute("SELECT pg_temp.bench_claim_ms(%s, %s, %s, false)",
                               [probe, QUEUE, CLAIM_LIMIT]).fetchone()  # fmt: skip
        assert row is not None
        if n >= CLAIM_WARMUP:
            samples.append(float(row[0]))
    return statistics.median(samples)


def _share(spent: float | None, before: float | None, wall: float) -> float | None:
    return None if spent is None or before is None else (spent - before) / wall


class _Sampler:
    """Takes the rows: one snapshot under the producer's lock, then the claim probe."""

    def __init__(self, conn: Conn, producer: _Producer, qid: int, probe: int) -> None:
        self.conn, self.producer, self.qid, self.probe = conn, producer, qid, probe
        self.postmaster = postmaster_pid(conn)
        self.claimed_twice: set[int] = set()
        self.start: datetime = conn.execute("SELECT pg_catalog.now()").fetchall()[0][0]
        self._since = self.start
        self._usage: Usage = read_usage(conn, self.postmaster)

    def take(self) -> Sample:
        with self.conn.transaction():
            self.conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            with self.producer.lock:  # the snapshot is taken by this statement
                until = self.conn.execute("SELECT pg_catalog.statement_timestamp()")
                enqueued = self.producer.enqueued
            until_at: datetime = until.fetchall()[0][0]
            args = {"q": self.qid, "since": self._since, "until": until_at}
            row = self.conn.execute(_SNAPSHOT, args).fetchall()[0]
        usage, before = read_usage(self.conn, self.postmaster), self._usage
        window = (until_at - self._since).total_seconds()
        self.claimed_twice.update(row[8])
        sample = Sample(
            elapsed_s=(until_at - self.start).total_seconds(), per_second=row[0] / window,
            backlog=row[1], jobs=row[2], executions=row[3], pruned=enqueued - row[2],
            jobs_bytes=row[4], executions_bytes=row[5], claim_index_bytes=row[6],
            jobs_indexes_bytes=row[7], claim_ms=_claim_ms(self.conn, self.probe),
            autovacuums=row[9],
            server_cpu=_share(usage.server_cpu_s, before.server_cpu_s, window),
            workers_cpu=(usage.workers_cpu_s - before.workers_cpu_s) / window,
        )  # fmt: skip
        self._since, self._usage = until_at, usage
        return sample


def _count(conn: Conn, qid: int, enqueued: int, seen_twice: set[int]) -> Outcome:
    row = conn.execute(_LEFT, {"q": qid}).fetchall()[0]
    twice = len(seen_twice | set(row[4]))
    return Outcome(enqueued, left=row[0], left_completed=row[1], executions=row[2],
                   executions_completed=row[3], claimed_twice=twice)  # fmt: skip


def _wait_drained(conn: Conn, qid: int, workers: WorkerProcesses) -> None:
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    while int(conn.execute(_UNFINISHED, [qid]).fetchall()[0][0]) > 0:
        workers.check_alive()
        if time.monotonic() > deadline:
            log.warning("backlog not drained after %d s; counting anyway", DRAIN_TIMEOUT_S)
            return
        time.sleep(0.2)


def _soak(
    url: str, conn: Conn, options: SoakOptions, rate: float, work: Path
) -> tuple[tuple[Sample, ...], Outcome]:
    """The soak proper, from an empty jobs table: the rows, then the count at the end."""
    qid = int(conn.execute("SELECT queue_id FROM codity.create_queue(%s, "
                           "p_keep_completed_seconds => %s)", [QUEUE, options.keep])
              .fetchall()[0][0])  # fmt: skip
    conn.execute("VACUUM ANALYZE codity.jobs, codity.job_executions")
    scheduler, producer = _Scheduler(url), _Producer(url, rate)
    samples: list[Sample] = []
    with WorkerProcesses(url, app="codity.worker.demo:registry", queue=QUEUE,
                         concurrency=options.concurrency, count=options.workers, listen=True,
                         log_dir=work, label="soak") as workers:  # fmt: skip
        workers.wait_ready(conn)
        probe = conn.execute("SELECT codity.register_worker('soak-probe', ARRAY[%s])", [QUEUE])
        conn.execute(TIMED_CLAIM)
        sampler = _Sampler(conn, producer, qid, int(probe.fetchall()[0][0]))
        began = time.monotonic()
        scheduler.start()
        producer.start()
        try:
            for n in range(1, options.windows + 1):
                while (wait := began + n * options.sample - time.monotonic()) > 0:
                    _check(workers, scheduler, producer)
                    time.sleep(min(wait, 0.5))
                samples.append(sampler.take())
                print(row(samples[-1]), flush=True)
            producer.halt.set()
            producer.join()
            _check(workers, scheduler)
            _wait_drained(conn, qid, workers)
        finally:
            producer.halt.set()
            scheduler.halt.set()
            producer.join()
            scheduler.join()
        codes = workers.stop()
    if any(codes):
        raise BenchError(f"soak: worker exit codes {codes}\n{workers.log_tail()}")
    return tuple(samples), _count(conn, qid, producer.enqueued, sampler.claimed_twice)


def run_soak(url: str, options: SoakOptions) -> SoakReport:
    """Measure the rate unless given, then soak, in a scratch database on ``url``'s server."""
    load_before, began = load_average(), time.monotonic()
    started_at = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    # One line per tick and per prune: the rows are the record here.
    quiet = logging.getLogger("codity.scheduler")
    level = quiet.level
    quiet.setLevel(logging.WARNING)
    try:
        with (
            tempfile.TemporaryDirectory(prefix="codity-soak-") as tmp,
            scratch_database(url, "codity_soak") as scratch,
            psycopg.connect(scratch, autocommit=True) as conn,
        ):
            measured, rate = None, options.rate
            if rate is None:
                log.info("measuring the drain rate: %d no-op jobs, %d workers x %d",
                         MEASURE_JOBS, options.workers, options.concurrency)  # fmt: skip
                config = Config(CODITY, options.workers, options.concurrency)
                measured = codity_drain(scratch, conn, config, MEASURE_JOBS, Path(tmp)).per_second
                rate = measured / 2
                reset_jobs(conn)
            print(_settings(options, rate, measured), flush=True)
            print(HEADER, flush=True)
            samples, outcome = _soak(scratch, conn, options, rate, Path(tmp))
            machine = describe_machine(conn, load_before)
    finally:
        quiet.setLevel(level)
    return SoakReport(options, rate, measured, samples, outcome, machine, started_at,
                      time.monotonic() - began)  # fmt: skip


def _settings(o: SoakOptions, rate: float, measured: float | None) -> str:
    how = (f"half the measured drain rate of {measured:,.0f} jobs/s ({MEASURE_JOBS:,} no-op "
           "jobs)" if measured else "given (--rate)")  # fmt: skip
    return (
        f"codity soak: {o.minutes:g} min at {rate:,.0f} jobs/s ({how}); {o.workers} worker "
        f"processes x concurrency {o.concurrency}; queue '{QUEUE}' keeps completed jobs "
        f"{o.keep} s; scheduler tick {TICK_MS} ms (tick, then prune); a sample every "
        f"{o.sample:g} s, claim cost the median of {CLAIM_SAMPLES} rolled-back "
        f"codity.claim(probe, '{QUEUE}', {CLAIM_LIMIT}) timed in the server\n"
    )


def run_soak_command(url: str, options: SoakOptions) -> int:
    """``codity soak``: the rows as they come, then the verdicts and the machine; 0 when
    every verdict that could be judged holds."""
    report = run_soak(url, options.checked())
    print()
    print(render_verdicts(report))
    print()
    print(render_machine(report))
    return 1 if any(v.holds is False for v in verdicts(report)) else 0
