"""What the Node peers' runs share: a scratch database, worker processes at a start line,
their tallies, and pickup samples read back.

Each worker process is one of our scripts (codity/bench/node/) under the machine's Node; it
connects, creates the file named by ``BENCH_READY`` and waits for the one named by
``BENCH_GO``, so that every process begins together, as Codity's workers do when their
paused queue is resumed and PGQueuer's at their own start line. At the end each writes
its tally to ``BENCH_RESULT``: jobs run, distinct payload ids, its first job's start and
(Graphile Worker) when its run ended, in Unix seconds.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

from codity.bench._against_model import PickupRun
from codity.bench._node_env import NodeEnv
from codity.bench._workers import BenchError, stop_processes

__all__ = ["NodeWorkers", "Tally", "node_database", "pickup_run", "read_starts"]


@dataclass(frozen=True, slots=True)
class Tally:
    """What one worker process says it ran."""

    ran: int
    distinct: int
    first: float | None
    finished: float | None


@contextmanager
def node_database(url: str, env: NodeEnv, install: str) -> Iterator[str]:
    """A new database on ``url``'s server with the peer's schema (our script's ``install``
    command, through the peer's own API), dropped on exit; yields its URL."""
    name = f"codity_bench_{env.peer.package.replace('-', '_')}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        parts = urlsplit(url)
        scratch = urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, ""))
        env.client(scratch, install, timeout=120)
        yield scratch
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
            admin.execute(drop.format(sql.Identifier(name)))


class NodeWorkers:
    """``processes`` runs of our script held at the start line until ``go``; SIGTERM on
    exit (or by ``stop``), which makes each write its tally."""

    def __init__(self, env: NodeEnv, dsn: str, processes: int, label: str, *args: str,
                 **extra: str) -> None:  # fmt: skip
        self.env = env
        self.dsn = dsn
        self.go_file = env.prefix / f"{label}.go"
        names = [f"{label}-{n}" for n in range(processes)]
        self._ready = [env.prefix / f"{n}.ready" for n in names]
        self._results = [env.prefix / f"{n}.json" for n in names]
        self._logs = [env.prefix / f"{n}.log" for n in names]
        self._command = env.command(*args)
        self._extra = extra
        self._procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> NodeWorkers:
        for path in [self.go_file, *self._ready, *self._results]:
            path.unlink(missing_ok=True)
        for ready, result, log in zip(self._ready, self._results, self._logs, strict=True):
            env = self.env.env(self.dsn, BENCH_READY=str(ready), BENCH_GO=str(self.go_file),
                               BENCH_RESULT=str(result), **self._extra)  # fmt: skip
            with log.open("wb") as out:
                self._procs.append(subprocess.Popen(
                    self._command, env=env, cwd=self.env.prefix, stdin=subprocess.DEVNULL,
                    stdout=out, stderr=subprocess.STDOUT,
                ))  # fmt: skip
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:  # fmt: skip
        self.stop()

    def wait_ready(self, timeout: float = 60.0) -> None:
        self._wait_for(self._ready, timeout, "ready")

    def go(self) -> None:
        self.go_file.touch()

    def wait_results(self, timeout: float) -> None:
        """Until every process has written its tally (Graphile Worker's ``runOnce`` ends)."""
        self._wait_for(self._results, timeout, "done")

    def _wait_for(self, paths: list[Path], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not all(path.exists() for path in paths):
            self.check_alive()
            if time.monotonic() > deadline:
                raise BenchError(f"{self.env.peer.system} workers not {what} after "
                                 f"{timeout:.0f}s\n{self.log_tail()}")  # fmt: skip
            time.sleep(0.005)

    def check_alive(self) -> None:
        dead = [p.returncode for p in self._procs if p.poll() is not None]
        if dead:
            raise BenchError(f"a {self.env.peer.system} worker exited early ({dead[0]})\n"
                             f"{self.log_tail()}")  # fmt: skip

    def stop(self, timeout: float = 60.0) -> tuple[int, ...]:
        return stop_processes(self._procs, timeout)

    def tallies(self) -> list[Tally]:
        found = []
        for path in self._results:
            if not path.exists():
                raise BenchError(f"{self.env.peer.system}: a worker wrote no tally\n"
                                 f"{self.log_tail()}")  # fmt: skip
            data: dict[str, Any] = json.loads(path.read_text())
            found.append(Tally(int(data["ran"]), int(data["distinct"]), data["first"],
                               data.get("finished")))  # fmt: skip
        return found

    def log_tail(self, lines: int = 15) -> str:
        tails = []
        for path in self._logs:
            text = path.read_text(errors="replace").splitlines()[-lines:] if path.exists() else []
            tails.append(f"--- {path.name} ---\n" + "\n".join(text))
        return "\n".join(tails)


def read_starts(path: Path) -> dict[int, float]:
    """The pickup handler's ``id start`` lines."""
    if not path.exists():
        return {}
    found = {}
    for line in path.read_text().splitlines():
        job, _, started = line.partition(" ")
        found[int(job)] = float(started)
    return found


def pickup_run(system: str, sent: dict[int, tuple[float, float]], workers: NodeWorkers,
               starts: Path) -> PickupRun:  # fmt: skip
    """Wait for every sample's start; the latencies, as PGQueuer's are taken."""
    deadline = time.monotonic() + 30
    while len(started := read_starts(starts)) < len(sent):
        if time.monotonic() > deadline:
            raise BenchError(f"{system} pickup: jobs never started\n{workers.log_tail()}")
        workers.check_alive()
        time.sleep(0.05)
    return PickupRun(
        system,
        total_ms=tuple((started[i] - sent[i][0]) * 1000 for i in sent),
        after_commit_ms=tuple((started[i] - sent[i][1]) * 1000 for i in sent),
    )
