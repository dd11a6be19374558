"""``codity up``: run the scheduler and N workers as child processes, and keep them running.

Each child is a plain ``codity scheduler`` / ``codity worker`` process, so what runs under
the supervisor is exactly what runs on its own. A child that exits unexpectedly is
restarted with capped backoff. On SIGINT/SIGTERM every child gets SIGTERM (workers drain:
in-flight jobs finish or are released, attempt not charged); a child still running after
the grace period is killed. The supervisor exits 0 after a clean drain.

"Up" is said once every child answers, not when it was started: the web app serves
``/livez``, and each worker and the scheduler mark a health file of their own (the
supervisor gives each child its own ``CODITY_HEALTH_FILE``) after their first success the
database saw — a worker once registered, the scheduler after its first tick. A part still
silent after ``SLOW_START_S`` is named in a warning; the others are not held up by it.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from codity.stop_signal import StopSignal

__all__ = ["ChildSpec", "Supervisor", "codity_command", "serves"]

log = logging.getLogger(__name__)

SLOW_START_S = 60.0
"""After this long, the parts that have not answered yet are named in a warning."""


def codity_command() -> list[str]:
    """How to run ``codity``: the console script beside this interpreter, else ``-m``."""
    script = Path(sys.executable).with_name("codity")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "codity.cli"]


# How a child may end when told to stop: 0 after a clean drain, or killed by the signal
# itself when it came before the child had installed its handlers (still starting, so it
# held no job yet) — Ctrl-C in a terminal reaches every child of the group at once.
_STOPPED = (0, -signal.SIGTERM, -signal.SIGINT)


def _ignore_sigint_until_ready() -> None:
    """Run in the child before exec: start with SIGINT ignored.

    Ctrl-C in a terminal reaches every process of the group at once. A child interrupted
    while Python itself is starting dies with exit 1 ("Fatal Python error: init_import_site"),
    which reads as a failure. Ignored, the signal waits for nothing: the child installs its
    own SIGINT/SIGTERM handlers as it starts (they replace the ignore), and until then the
    supervisor's SIGTERM stops it.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def serves(url: str) -> Callable[[], bool]:
    """A readiness check: ``url`` answers 200 (the web app's ``/livez``)."""

    def check() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=0.5) as answer:
                return bool(answer.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    return check


@dataclass
class ChildSpec:
    name: str
    args: list[str]
    ready: Callable[[], bool] | None = None
    """How to tell it answers; None: it marks its own health file (workers, the scheduler)."""
    env: dict[str, str] = field(default_factory=dict)
    """Its own settings over the supervisor's (its DATABASE_URL: the login it connects as)."""
    process: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    next_start: float = 0.0
    started_at: float = field(default=0.0)
    health_file: Path | None = None


class Supervisor:
    def __init__(
        self,
        children: list[ChildSpec],
        *,
        env: dict[str, str],
        grace_s: float,
        on_ready: Callable[[], None] | None = None,
    ) -> None:
        self.children = children
        self.env = env
        self.grace_s = grace_s
        self.on_ready = on_ready
        self.stop = StopSignal()

    def _start(self, child: ChildSpec) -> None:
        env = {**self.env, **child.env}
        if child.health_file is not None:
            env = dict(env, CODITY_HEALTH_FILE=str(child.health_file))
        child.process = subprocess.Popen(
            [*codity_command(), *child.args], env=env, preexec_fn=_ignore_sigint_until_ready
        )
        child.started_at = time.monotonic()
        log.info("started %s (pid %d)", child.name, child.process.pid)

    def _silent(self) -> list[str]:
        """The children that have not answered yet."""
        silent = []
        for child in self.children:
            if child.ready is not None:
                answered = child.ready()
            else:
                answered = child.health_file is not None and child.health_file.exists()
            if not answered:
                silent.append(child.name)
        return silent

    def run(self) -> int:
        self.stop.install(signal.SIGINT, signal.SIGTERM)
        with tempfile.TemporaryDirectory(prefix="codity-up-") as marks:
            for child in self.children:
                if child.ready is None:
                    child.health_file = Path(marks) / f"{child.name}.alive"
                self._start(child)
            return self._watch()

    def _watch(self) -> int:
        began, announced, warned = time.monotonic(), False, False
        interval = 0.1  # while starting; then the restart check's pace
        while not self.stop.wait(interval):
            now = time.monotonic()
            if not announced:
                silent = self._silent()
                if not silent:
                    announced, interval = True, 0.5
                    if self.on_ready is not None:
                        self.on_ready()
                elif not warned and now - began > SLOW_START_S:
                    warned = True
                    log.warning(
                        "still starting after %.0fs: %s not answering yet",
                        now - began,
                        ", ".join(silent),
                    )
            for child in self.children:
                proc = child.process
                if proc is not None and proc.poll() is None:
                    continue
                if proc is not None:
                    # Ran a minute or more: a fresh failure, not a crash loop.
                    if now - child.started_at > 60:
                        child.restarts = 0
                    delay = min(2**child.restarts, 30)
                    log.warning(
                        "%s exited with %s; restarting in %ds", child.name, proc.returncode, delay
                    )
                    child.process = None
                    child.restarts += 1
                    child.next_start = now + delay
                if now >= child.next_start:
                    self._start(child)
        return self._shutdown()

    def _shutdown(self) -> int:
        running = [c for c in self.children if c.process is not None and c.process.poll() is None]
        log.info(
            "stopping %d process(es); workers drain for up to %.0fs", len(running), self.grace_s
        )
        for child in running:
            assert child.process is not None
            child.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.grace_s + 5
        clean = True
        for child in running:
            assert child.process is not None
            try:
                code = child.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.error("%s did not stop in time; killing it", child.name)
                child.process.kill()
                child.process.wait()
                clean = False
                continue
            if code not in _STOPPED:
                log.error("%s exited with %d", child.name, code)
                clean = False
        return 0 if clean else 1
