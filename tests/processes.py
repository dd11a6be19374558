"""Real ``codity`` processes for the fault tests, and waiting on the database for them.

- :class:`Processes` starts ``codity worker`` / ``codity scheduler`` / ``codity up`` as
  child processes (the console script next to ``sys.executable``), each with its output in
  a log file, and guarantees on exit that none survives: stopped ones get SIGCONT first,
  then everything still running is SIGKILLed (a whole process group for ``codity up``,
  whose children would otherwise outlive it) and reaped.
- :func:`wait_until` polls a condition until it holds or a deadline passes; nothing is
  ordered by sleeping. It fails early, with the process's log, when a process that must
  stay up has exited.
- :class:`Probe` is a database connection for polling that reconnects when the server
  goes away (restart tests); :class:`Ticker` calls ``codity.tick()`` on a timer in a
  thread, as a scheduler would.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import psycopg

from codity.supervisor import codity_command

__all__ = [
    "APP",
    "CODITY",
    "FAST",
    "REPO_ROOT",
    "CodityProcess",
    "Probe",
    "Processes",
    "Ticker",
    "wait_until",
]

T = TypeVar("T")

REPO_ROOT = Path(__file__).resolve().parents[1]
CODITY = codity_command()
APP = "tests.fault_tasks:registry"
# Short intervals: a heartbeat every 0.2 s, a fallback poll every 0.5 s, 3 s of grace.
FAST = {
    "WORKER_HEARTBEAT_MS": "200",
    "WORKER_POLL_INTERVAL_MS": "500",
    "SHUTDOWN_GRACE_MS": "3000",
}


@dataclass
class CodityProcess:
    """One running ``codity`` command."""

    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    own_group: bool
    started: float = field(default_factory=time.monotonic)
    stopped: bool = False

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        """The exit code, or None while running.

        A group leader is never reaped here (only by :meth:`Processes.cleanup`): while its
        zombie holds the pid, the group id cannot be given to another process, so signalling
        the group can never reach a stranger. pid_max is 32768 on these machines, and every
        PostgreSQL connection forks: pids come round again within minutes.
        """
        if self.popen.returncode is not None or not self.own_group:
            return self.popen.poll()
        info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        if info is None or info.si_pid == 0:
            return None
        if info.si_code in (os.CLD_KILLED, os.CLD_DUMPED):
            return -info.si_status
        return info.si_status

    def is_running(self) -> bool:
        return self.returncode is None

    def send(self, signum: signal.Signals, *, group: bool | None = None) -> None:
        """Signal the process: its whole group when it leads one (as Ctrl-C would), unless
        ``group=False`` (the leader alone)."""
        if signum == signal.SIGSTOP:
            self.stopped = True
        if self.own_group:
            assert self.popen.returncode is None, "the group leader was reaped"
            if group is False:
                os.kill(self.pid, signum)
            else:
                os.killpg(self.pid, signum)
        else:
            self.popen.send_signal(signum)
        if signum == signal.SIGCONT:
            self.stopped = False

    def wait(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while (code := self.returncode) is None:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{self.name} (pid {self.pid}) still running after {timeout}s\n{self.output()}"
                )
            time.sleep(0.02)
        return code

    def logged(self, text: str) -> bool:
        """Whether the process has written ``text`` to its output yet."""
        try:
            return text in self.log_path.read_text(errors="replace")
        except OSError:
            return False

    def output(self, tail: int = 60) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return f"--- {self.name}: no log"
        return f"--- {self.name} (last {tail} lines of {self.log_path})\n" + "\n".join(
            lines[-tail:]
        )


class Processes:
    """Start ``codity`` processes; on exit none of them (or their children) survives."""

    def __init__(self, log_dir: Path, db_url: str, **settings: str) -> None:
        self.log_dir = log_dir
        self.db_url = db_url
        self.settings = settings
        self.started: list[CodityProcess] = []

    def env(self, **settings: str) -> dict[str, str]:
        env = dict(os.environ)
        pythonpath = [str(REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])]
        env.update(
            DATABASE_URL=self.db_url,
            PYTHONPATH=os.pathsep.join(pythonpath),
            PYTHONUNBUFFERED="1",
            **FAST,
        )
        env.update(self.settings)
        env.update(settings)
        return env

    def start(
        self,
        name: str,
        args: Sequence[str],
        *,
        own_group: bool = False,
        settings: dict[str, str] | None = None,
    ) -> CodityProcess:
        log_path = self.log_dir / f"{name}-{len(self.started)}.log"
        with log_path.open("wb") as log:
            popen = subprocess.Popen(
                [*CODITY, *args],
                env=self.env(**(settings or {})),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=REPO_ROOT,
                start_new_session=own_group,
            )
        process = CodityProcess(name, popen, log_path, own_group)
        self.started.append(process)
        return process

    def worker(
        self,
        queue: str,
        *,
        concurrency: int = 5,
        name: str = "worker",
        **settings: str,
    ) -> CodityProcess:
        args = ["worker", "--app", APP, "--queue", queue, "--concurrency", str(concurrency)]
        return self.start(name, args, settings=settings)

    def scheduler(self, tick_ms: int = 200, *, name: str = "scheduler") -> CodityProcess:
        return self.start(name, ["scheduler", "--tick-ms", str(tick_ms)])

    def logs(self) -> str:
        return "\n".join(p.output() for p in self.started)

    def cleanup(self) -> None:
        for process in self.started:
            with contextlib.suppress(ProcessLookupError):
                if process.stopped:
                    process.send(signal.SIGCONT)
                if process.own_group:
                    # The group outlives its leader: children of `codity up` too. Safe only
                    # while the leader is not reaped (see CodityProcess.returncode).
                    if process.popen.returncode is None:
                        os.killpg(process.pid, signal.SIGKILL)
                else:
                    process.popen.kill()  # a no-op once reaped (Popen checks)
        for process in self.started:
            process.popen.wait(timeout=30)

    def __enter__(self) -> Processes:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.cleanup()


def wait_until(
    condition: Callable[[], T],
    *,
    timeout: float,
    what: str,
    interval: float = 0.05,
    alive: Iterable[CodityProcess] = (),
) -> T:
    """Poll ``condition`` until it returns something truthy; return that.

    Fails after ``timeout`` seconds, or at once when a process in ``alive`` has exited,
    with the logs of the processes concerned.
    """
    watched = list(alive)
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        for process in watched:
            if not process.is_running():
                raise AssertionError(
                    f"waiting for {what}: {process.name} exited with {process.returncode}\n"
                    f"{process.output()}"
                )
        if time.monotonic() > deadline:
            logs = "\n".join(p.output() for p in watched)
            raise AssertionError(f"{what}: not within {timeout}s\n{logs}")
        time.sleep(interval)


class Probe:
    """An autocommit connection for polling, reopened when the server went away."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._conn: psycopg.Connection[Any] | None = None

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed or self._conn.broken:
            if self._conn is not None:
                self._conn.close()
            self._conn = psycopg.connect(self.url, autocommit=True, connect_timeout=5)
        return self._conn

    def rows(self, query: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run a read; a connection found dead (server restarted) is replaced once."""
        try:
            return self._connection().execute(query, params).fetchall()
        except psycopg.OperationalError:
            self.close()
            return self._connection().execute(query, params).fetchall()

    def one(self, query: str, params: Sequence[Any] = ()) -> tuple[Any, ...]:
        rows = self.rows(query, params)
        assert len(rows) == 1, (query, rows)
        return rows[0]

    def value(self, query: str, params: Sequence[Any] = ()) -> Any:
        return self.one(query, params)[0]

    def try_value(self, query: str, params: Sequence[Any] = ()) -> Any:
        """``value``, or None while the server cannot be reached."""
        try:
            return self.value(query, params)
        except psycopg.OperationalError:
            self.close()
            return None

    def execute(self, query: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run a write and return its rows, if any; never retried (it may have committed)."""
        cur = self._connection().execute(query, params)
        return cur.fetchall() if cur.description else []

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> Probe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Ticker:
    """Call ``codity.tick()`` every ``interval`` seconds in a thread, as a scheduler would.

    ``stale_after`` is tick's p_worker_stale_after: how long a silent worker stays active.
    """

    def __init__(self, url: str, interval: float = 0.2, stale_after: str = "15 seconds") -> None:
        self.url = url
        self.interval = interval
        self.stale_after = stale_after
        self.ticks = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ticker", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with psycopg.connect(self.url, autocommit=True) as conn:
                    while not self._stop.is_set():
                        conn.execute(
                            "SELECT * FROM codity.tick(now(), %s::interval)", [self.stale_after]
                        )
                        self.ticks += 1
                        self._stop.wait(self.interval)
            except psycopg.Error as exc:
                self.errors.append(f"{type(exc).__name__}: {exc}")
                self._stop.wait(self.interval)

    def __enter__(self) -> Ticker:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
