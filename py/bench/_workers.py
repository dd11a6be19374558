"""Real ``codity worker`` processes for the benchmark: start, wait until ready, stop.

The workers are the command users run, started as subprocesses through the ``codity``
console script next to the running interpreter (``python -m codity.cli`` otherwise). Their
output goes to a log file each; it is shown when one of them fails.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import psycopg

from codity.supervisor import codity_command

__all__ = ["BenchError", "WorkerProcesses", "stop_processes"]

Conn = psycopg.Connection[Any]
_READY = """
SELECT (SELECT count(DISTINCT w.name) FROM codity.workers w
        WHERE w.status = 'active' AND w.name = ANY (%(names)s)),
       (SELECT count(*) FROM pg_catalog.pg_stat_activity a
        WHERE a.datname = pg_catalog.current_database()
          AND a.application_name = 'codity-listener' AND a.state = 'idle')
"""


def stop_processes(procs: list[subprocess.Popen[bytes]], timeout: float) -> tuple[int, ...]:
    """SIGTERM every process still running, then wait for each; one that does not exit
    within ``timeout`` is killed (code -9). The exit codes, in order."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    codes = []
    for proc in procs:
        try:
            codes.append(proc.wait(timeout))
        except subprocess.TimeoutExpired:
            proc.kill()
            codes.append(proc.wait())
    return tuple(codes)


class BenchError(RuntimeError):
    """A measurement could not be taken (a worker died, a count did not add up)."""


class WorkerProcesses:
    """``count`` worker processes on one queue (or several, in the order given), stopped
    with SIGTERM on exit."""

    def __init__(
        self,
        url: str,
        *,
        app: str,
        queue: str | tuple[str, ...],
        concurrency: int,
        count: int,
        listen: bool,
        log_dir: Path,
        label: str,
        env: dict[str, str] | None = None,
    ) -> None:
        self.url = url
        self.env = os.environ | (env or {}) | {"DATABASE_URL": url}
        self.names = [f"bench-{label}-{n}" for n in range(count)]
        self.listen = listen
        queues = (queue,) if isinstance(queue, str) else queue
        self._command = [
            *codity_command(), "worker", "--app", app,
            *(arg for q in queues for arg in ("--queue", q)),
            "--concurrency", str(concurrency), *([] if listen else ["--no-listen"]),
        ]  # fmt: skip
        self._logs = [log_dir / f"{name}.log" for name in self.names]
        self._procs: list[subprocess.Popen[bytes]] = []
        self.exit_codes: tuple[int, ...] = ()

    def __enter__(self) -> WorkerProcesses:
        for name, log in zip(self.names, self._logs, strict=True):
            with log.open("wb") as out:
                self._procs.append(
                    subprocess.Popen(
                        [*self._command, "--name", name],
                        env=self.env,
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                    )
                )
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def wait_ready(self, conn: Conn, timeout: float = 60.0) -> None:
        """Until every worker is registered and, when listening, its listener connected."""
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive()
            row = conn.execute(_READY, {"names": self.names}).fetchone()
            assert row is not None
            registered, listening = int(row[0]), int(row[1])
            if registered == len(self.names) and (not self.listen or listening >= registered):
                return
            if time.monotonic() > deadline:
                raise BenchError(
                    f"workers not ready after {timeout:.0f}s "
                    f"({registered} registered, {listening} listening)\n{self.log_tail()}"
                )
            time.sleep(0.05)

    def stop(self, timeout: float = 60.0) -> tuple[int, ...]:
        """SIGTERM every worker and wait; a worker that does not exit is killed (code -9)."""
        if self.exit_codes or not self._procs:
            return self.exit_codes
        self.exit_codes = stop_processes(self._procs, timeout)
        return self.exit_codes

    def check_alive(self) -> None:
        dead = [p.returncode for p in self._procs if p.poll() is not None]
        if dead:
            raise BenchError(f"a worker exited early (code {dead[0]})\n{self.log_tail()}")

    def log_tail(self, lines: int = 15) -> str:
        tails = []
        for name, log in zip(self.names, self._logs, strict=True):
            text = log.read_text(errors="replace").splitlines()[-lines:] if log.exists() else []
            tails.append(f"--- {name} ---\n" + "\n".join(text))
        return "\n".join(tails)
