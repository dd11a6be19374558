"""PGQueuer measured by the method used for Codity: drain, enqueue, pickup latency.

The drain follows PGQueuer's own benchmark (tools/benchmark.py, strategy ``drain``): N
jobs enqueued up front in batches, then the workers empty the queue. Here the workers are
real processes running ``pgqueuer.run`` as ``pgq run`` does, started together at a start
line once each has connected (see pgqueuer_worker.py), and the time runs from the first
pick to the last completion, both read from PGQueuer's log table
(``pgqueuer_log.created``: the ``now()`` of the dequeue and of the completion batch, on
the database's clock). Every job must have been picked once and completed once, and the
queue table must be empty.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import psycopg

from codity.bench._against_model import PGQUEUER, Config, DrainRun, EnqueueRun, PickupRun
from codity.bench._pgq_env import AGENT, PgqEnv
from codity.bench._usage import postmaster_pid, read_usage, spent_since
from codity.bench._workers import BenchError, stop_processes

__all__ = ["pgq_drain", "pgq_enqueue", "pgq_pickup", "pgq_reset"]

Conn = psycopg.Connection[Any]
NOOP = "bench_noop"
PICKUP = "bench_pickup"
_OUTCOME = """
SELECT (SELECT count(*) FROM pgqueuer),
       count(*) FILTER (WHERE l.status = 'picked'),
       count(*) FILTER (WHERE l.status = 'successful'),
       EXTRACT(epoch FROM pg_catalog.max(l.created) FILTER (WHERE l.status = 'successful')
                        - pg_catalog.min(l.created) FILTER (WHERE l.status = 'picked'))
FROM pgqueuer_log l
WHERE l.entrypoint = %s
"""
_DONE = "SELECT count(*) FROM pgqueuer_log l WHERE l.status = 'successful' AND l.entrypoint = %s"


class PgqWorkers:
    """PGQueuer worker processes (``pgq run``'s supervisor, see pgqueuer_worker.py) held at
    the start line until ``go``; SIGTERM on exit."""

    def __init__(self, pgq: PgqEnv, dsn: str, config: Config, label: str, **env: str) -> None:
        self.pgq = pgq
        self.dsn = dsn
        self.go_file = pgq.work / f"{label}.go"
        self._ready = [pgq.work / f"{label}-{n}.ready" for n in range(config.processes)]
        self._logs = [pgq.work / f"{label}-{n}.log" for n in range(config.processes)]
        limit = [] if config.limit is None else ["--max-concurrent-tasks", str(config.limit)]
        self._command = [str(pgq.python), str(pgq.work / f"{AGENT}.py"), "work",
                         "--batch-size", str(config.batch), *limit]  # fmt: skip
        self._env = env
        self._procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> PgqWorkers:
        for path in [self.go_file, *self._ready]:
            path.unlink(missing_ok=True)
        for ready, log in zip(self._ready, self._logs, strict=True):
            env = self.pgq.env(self.dsn, BENCH_READY=str(ready), BENCH_GO=str(self.go_file),
                               **self._env)  # fmt: skip
            with log.open("wb") as out:
                self._procs.append(subprocess.Popen(
                    self._command, env=env, cwd=self.pgq.work, stdin=subprocess.DEVNULL,
                    stdout=out, stderr=subprocess.STDOUT,
                ))  # fmt: skip
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:  # fmt: skip
        self.stop()

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not all(path.exists() for path in self._ready):
            self.check_alive()
            if time.monotonic() > deadline:
                raise BenchError(f"PGQueuer workers not ready after {timeout:.0f}s\n"
                                 + self.log_tail())  # fmt: skip
            time.sleep(0.02)

    def go(self) -> None:
        self.go_file.touch()

    def check_alive(self) -> None:
        dead = [p.returncode for p in self._procs if p.poll() is not None]
        if dead:
            raise BenchError(f"a PGQueuer worker exited early ({dead[0]})\n{self.log_tail()}")

    def stop(self, timeout: float = 60.0) -> tuple[int, ...]:
        return stop_processes(self._procs, timeout)

    def log_tail(self, lines: int = 15) -> str:
        tails = []
        for path in self._logs:
            text = path.read_text(errors="replace").splitlines()[-lines:] if path.exists() else []
            tails.append(f"--- {path.name} ---\n" + "\n".join(text))
        return "\n".join(tails)


def pgq_reset(conn: Conn) -> None:
    """Empty PGQueuer's queue and log (its scratch database only)."""
    conn.execute("TRUNCATE pgqueuer, pgqueuer_log, pgqueuer_statistics")


def pgq_enqueue(pgq: PgqEnv, dsn: str, jobs: int, batch: int) -> EnqueueRun:
    """PGQueuer's ``Queries.enqueue`` from its own client: one by one, or ``batch`` per call."""
    found = pgq.client(dsn, "enqueue", "--jobs", str(jobs), "--batch", str(batch))
    return EnqueueRun(PGQUEUER, jobs, batch, float(found["seconds"]))


def _wait(conn: Conn, workers: PgqWorkers, entrypoint: str, jobs: int) -> None:
    deadline = time.monotonic() + 120 + jobs / 50
    while int(conn.execute(_DONE, [entrypoint]).fetchall()[0][0]) < jobs:
        if time.monotonic() > deadline:
            raise BenchError(f"PGQueuer drain: jobs left unfinished\n{workers.log_tail()}")
        workers.check_alive()
        time.sleep(0.1)


def pgq_drain(pgq: PgqEnv, dsn: str, conn: Conn, config: Config, jobs: int) -> DrainRun:
    """N no-op jobs enqueued up front, then drained by ``config.processes`` worker processes."""
    pgq_reset(conn)
    pgq_enqueue(pgq, dsn, jobs, 1_000)
    conn.execute("VACUUM ANALYZE pgqueuer, pgqueuer_log")
    postmaster = postmaster_pid(conn)
    with PgqWorkers(pgq, dsn, config, "drain") as workers:
        workers.wait_ready()
        before = read_usage(conn, postmaster)
        workers.go()
        _wait(conn, workers, NOOP, jobs)
        spent = spent_since(conn, before, postmaster)
        codes = workers.stop()
    if any(codes):
        raise BenchError(f"PGQueuer drain: worker exit codes {codes}\n{workers.log_tail()}")
    row = conn.execute(_OUTCOME, [NOOP]).fetchall()[0]
    left, picked, done, seconds = int(row[0]), int(row[1]), int(row[2]), float(row[3])
    if left or picked != jobs or done != jobs:
        raise BenchError(f"PGQueuer drain of {jobs}: {left} left, {picked} picks, {done} "
                         "completions; every job should have run exactly once")  # fmt: skip
    return DrainRun(jobs, seconds, spent.wal_bytes, spent.server_cpu_s, spent.workers_cpu_s,
                    wal_window=spent.wal_window, statements=spent.statements)  # fmt: skip


def _starts(path: Path) -> dict[int, float]:
    if not path.exists():
        return {}
    found = {}
    for line in path.read_text().splitlines():
        job, _, started = line.partition(" ")
        found[int(job)] = float(started)
    return found


def pgq_pickup(pgq: PgqEnv, dsn: str, conn: Conn, samples: int) -> PickupRun:
    """One idle worker at PGQueuer's defaults; the producer enqueues one job at a time."""
    pgq_reset(conn)
    starts_file = pgq.work / "pickup-starts.txt"
    starts_file.unlink(missing_ok=True)
    config = Config(PGQUEUER, 1, 10, default=True)
    with PgqWorkers(pgq, dsn, config, "pickup", BENCH_STARTS=str(starts_file)) as worker:
        worker.wait_ready()
        worker.go()
        time.sleep(1.0)  # its first dequeue found nothing: it is idle, listening
        sent = {int(i): (s, a) for i, s, a in pgq.client(dsn, "pickup", "--samples",
                                                         str(samples))["samples"]}  # fmt: skip
        deadline = time.monotonic() + 30
        while len(started := _starts(starts_file)) < len(sent):
            if time.monotonic() > deadline:
                raise BenchError(f"PGQueuer pickup: jobs never started\n{worker.log_tail()}")
            worker.check_alive()
            time.sleep(0.1)
        codes = worker.stop()
    if any(codes):
        raise BenchError(f"PGQueuer pickup: worker exit code {codes}\n{worker.log_tail()}")
    return PickupRun(
        PGQUEUER,
        total_ms=tuple((started[i] - sent[i][0]) * 1000 for i in sent),
        after_commit_ms=tuple((started[i] - sent[i][1]) * 1000 for i in sent),
    )
