"""A pg_auto_failover cluster on loopback for the failover tests (``./test -m failover``).

:class:`AutoFailoverRig` (a context manager) builds, in a scratch folder owned by the
``postgres`` user, a monitor and two data nodes (PostgreSQL from Debian's packages, each
run by ``pg_autoctl`` as ``postgres``) on free loopback ports, with database ``codity``,
trust authentication and no SSL, and the tightened timeouts of the HA research
(../shared/HA.md §8: health checks every second, a node unhealthy after 3 s, a demote
timeout of 6 s, the keepers' network partition timeout at 4 s): a lost primary is replaced
in about 10 s. It waits until one node is ``primary`` and the other ``secondary`` (in
sync: synchronous replication on), and offers:

- :attr:`url`: ``postgresql://postgres@127.0.0.1:P1,127.0.0.1:P2/codity``, the multi-host
  URL every Codity process is given (codity.db.conninfo adds
  ``target_session_attrs=read-write`` for more than one host);
- :meth:`primary` / :meth:`secondary`: which node is which, read on the monitor;
- the faults: :meth:`kill_node` (SIGKILL the node's whole process group, keeper and
  PostgreSQL: a lost host), :meth:`stop_node` (``pg_autoctl stop``), :meth:`switchover`
  (``pg_autoctl perform switchover``); :meth:`rejoin` runs a stopped or killed node again
  (it comes back as the secondary, pg_rewind included); :meth:`wait_healthy` waits until
  both nodes are back, one primary and one secondary.

Every wait is bounded and fails with the tails of the cluster's logs. On exit (a failed
test included) every process the rig started is stopped (``pg_autoctl stop``, then SIGKILL
of its process group), no port of its is left listening, and the folder is removed
(``CODITY_KEEP_FAILOVER_RIG=1`` keeps it, logs included).

pg_autoctl must run as ``postgres``, so the rig needs root. When ``pg_autoctl`` is missing
it runs scripts/autofailover_prereqs.sh first (Debian's ``postgresql-N-auto-failover`` and
``pg-auto-failover-cli``), as tests/test_compose.py sets up Docker.

The first base backup of the secondary waits for a checkpoint on the primary, spread over
minutes by default (93 s measured): while the secondary is being made, the rig asks the
primary for an immediate ``CHECKPOINT`` every second, which ends the spread one at once.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import psycopg

from tests.ports import free_port

__all__ = ["AutoFailoverRig", "NodeState", "pg_bin_dir"]

T = TypeVar("T")

REPO_ROOT = Path(__file__).resolve().parents[1]
PREREQS = REPO_ROOT / "scripts" / "autofailover_prereqs.sh"
DBNAME = "codity"
USER = "postgres"

# ../shared/HA.md §8, "tight timeouts": measured 9-10 s from a lost primary to writes.
MONITOR_SETTINGS = {
    "pgautofailover.health_check_period": "1000",
    "pgautofailover.health_check_timeout": "1000",
    "pgautofailover.health_check_max_retries": "1",
    "pgautofailover.health_check_retry_delay": "500",
    "pgautofailover.node_considered_unhealthy_timeout": "3000",
    "pgautofailover.primary_demote_timeout": "6000",
}
# Below the demote timeout, so an isolated primary fences itself before it is replaced.
KEEPER_SETTINGS = {
    "timeout.network_partition_timeout": "4",
    "timeout.prepare_promotion_walreceiver": "2",
}


def pg_bin_dir() -> Path:
    """The server binaries of the newest PostgreSQL whose auto-failover extension is
    installed (``CODITY_FAILOVER_PG_BIN`` overrides)."""
    given = os.environ.get("CODITY_FAILOVER_PG_BIN")
    if given:
        return Path(given)
    found = sorted(
        (int(p.parent.parent.name), p.parent.parent / "bin")
        for p in Path("/usr/lib/postgresql").glob("*/lib/pgautofailover.so")
        if p.parent.parent.name.isdigit()
    )
    if not found:
        raise AssertionError(
            "no PostgreSQL with pg_auto_failover's extension under /usr/lib/postgresql "
            "after scripts/autofailover_prereqs.sh"
        )
    return found[-1][1]


def ensure_installed() -> Path:
    """pg_autoctl and a PostgreSQL for it, installed when missing; the binaries' folder."""
    if os.geteuid() != 0:
        raise AssertionError(
            "the failover tests run pg_autoctl as the postgres user (and install it when "
            "missing), so they must run as root: sudo ./test -m failover"
        )
    if shutil.which("pg_autoctl") is None or not list(
        Path("/usr/lib/postgresql").glob("*/lib/pgautofailover.so")
    ):
        done = subprocess.run(
            [str(PREREQS)], capture_output=True, text=True, timeout=900, check=False
        )
        if done.returncode != 0:
            raise AssertionError(
                f"{PREREQS} exited with {done.returncode}\n{done.stdout}\n{done.stderr}"
            )
    return pg_bin_dir()


@dataclass(frozen=True)
class NodeState:
    """One row of ``pgautofailover.node``, as the monitor sees it."""

    name: str
    port: int
    reported: str
    goal: str
    health: int

    def __str__(self) -> str:
        return f"{self.name}:{self.port} {self.reported}->{self.goal} health={self.health}"


@dataclass
class _Service:
    """One ``pg_autoctl`` service (monitor or node): its folder, port and process."""

    name: str
    port: int
    pgdata: Path
    popen: subprocess.Popen[bytes] | None = None
    runs: int = 0
    history: list[str] = field(default_factory=list)


class AutoFailoverRig:
    """A monitor and two PostgreSQL nodes under pg_auto_failover, on loopback."""

    def __init__(self, *, base: Path | None = None, tight: bool = True) -> None:
        self.pg_bin = ensure_installed()
        self.tight = tight
        self.base = base or Path(tempfile.mkdtemp(prefix="codity-failover-"))
        self.base.mkdir(parents=True, exist_ok=True)
        self.logs = self.base / "logs"
        self.monitor = _Service("monitor", free_port(), self.base / "monitor")
        self.nodes = {
            name: _Service(name, free_port(), self.base / name) for name in ("node1", "node2")
        }
        self.monitor_uri = (
            f"postgres://autoctl_node@127.0.0.1:{self.monitor.port}/pg_auto_failover"
            "?sslmode=disable"
        )
        ports = ",".join(f"127.0.0.1:{n.port}" for n in self.nodes.values())
        self.url = f"postgresql://{USER}@{ports}/{DBNAME}"
        """The multi-host URL of the two nodes."""
        self.timeline: list[tuple[float, str]] = []
        """(time.time(), what) of every step and fault, for reports."""
        self._user = pwd.getpwnam(USER)
        self._nudged = 0.0

    # -- running pg_autoctl as postgres ------------------------------------------------

    def _env(self) -> dict[str, str]:
        xdg = self.base / "xdg"
        return {
            "LANG": "C.UTF-8",
            "HOME": str(self.base),
            "PATH": f"{self.pg_bin}:/usr/bin:/bin",
            "XDG_CONFIG_HOME": str(xdg / "config"),
            "XDG_DATA_HOME": str(xdg / "data"),
            "XDG_RUNTIME_DIR": str(xdg / "run"),
        }

    def _as_postgres(self) -> dict[str, Any]:
        return {
            "user": self._user.pw_uid,
            "group": self._user.pw_gid,
            "extra_groups": [],
            "env": self._env(),
            "cwd": self.base,
        }

    def autoctl(self, *args: str, timeout: float = 60, check: bool = True, tries: int = 1) -> str:
        """Run ``pg_autoctl args`` as postgres in the foreground; its output. An idempotent
        command may be given ``tries`` (seen once: a ``config set`` or ``reload`` failing
        while the keeper was starting up)."""
        for attempt in range(1, tries + 1):
            done = subprocess.run(
                ["pg_autoctl", *args],
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
                stdin=subprocess.DEVNULL,
                **self._as_postgres(),
            )
            self._mark(f"pg_autoctl {' '.join(args[:2])} -> {done.returncode}")
            if done.returncode == 0 or attempt == tries:
                break
            self._mark(f"retrying: {done.stdout[-500:]} {done.stderr[-500:]}")
            time.sleep(1)
        if check and done.returncode != 0:
            raise AssertionError(
                f"pg_autoctl {' '.join(args)} exited with {done.returncode}\n"
                f"{done.stdout}\n{done.stderr}\n{self.log_tails()}"
            )
        return str(done.stdout) + str(done.stderr)

    def _background(self, service: _Service, *args: str) -> None:
        """Start ``pg_autoctl args`` as postgres in a process group of its own (its pid is
        the group's id: keeper and PostgreSQL are in it)."""
        assert service.popen is None or service.popen.poll() is not None, service.name
        service.runs += 1
        log_path = self.logs / f"{service.name}.log"
        with log_path.open("ab") as log:
            log.write(f"\n=== run {service.runs}: pg_autoctl {' '.join(args)}\n".encode())
            log.flush()
            service.popen = subprocess.Popen(
                ["pg_autoctl", *args],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                **self._as_postgres(),
            )
        self._mark(f"{service.name} started (pgid {service.popen.pid})")

    def _mark(self, what: str) -> None:
        self.timeline.append((time.time(), what))

    # -- building the cluster ------------------------------------------------------------

    def start(self) -> AutoFailoverRig:
        started = time.monotonic()
        for folder in ("logs", "xdg/config", "xdg/data", "xdg/run"):
            (self.base / folder).mkdir(parents=True, exist_ok=True)
        for path in [self.base, *self.base.rglob("*")]:
            os.chown(path, self._user.pw_uid, self._user.pw_gid)
        self.base.chmod(0o755)
        pgctl = str(self.pg_bin / "pg_ctl")
        self.autoctl(
            "create", "monitor", "--pgdata", str(self.monitor.pgdata),
            "--pgport", str(self.monitor.port), "--hostname", "127.0.0.1",
            "--auth", "trust", "--no-ssl", "--pgctl", pgctl,
            timeout=120,
        )  # fmt: skip
        self.autoctl(
            "config", "set", "--pgdata", str(self.monitor.pgdata),
            "postgresql.listen_addresses", "127.0.0.1",
        )  # fmt: skip
        self._background(self.monitor, "run", "--pgdata", str(self.monitor.pgdata))
        self.wait(
            lambda: self._monitor_rows("SELECT 1"),
            timeout=60,
            what="the monitor answering",
        )
        if self.tight:
            with self._monitor() as conn:
                for name, value in MONITOR_SETTINGS.items():
                    conn.execute(f"ALTER SYSTEM SET {name} = {value}")
                conn.execute("SELECT pg_reload_conf()")
        first, second = self.nodes.values()
        self._create_node(first)
        self.wait(
            lambda: any(s.name == first.name and s.reported == s.goal == "single"
                        for s in self.states()),
            timeout=120,
            what=f"{first.name} running as the single node",
        )  # fmt: skip
        self._create_node(second)
        # The secondary's pg_basebackup waits for a spread checkpoint on the primary: an
        # immediate CHECKPOINT requested meanwhile ends it at once (HA.md §7.9: 93 s).
        self.wait_healthy(timeout=180, nudge=lambda: self._checkpoint(first))
        if self.tight:
            for node in self.nodes.values():
                for name, value in KEEPER_SETTINGS.items():
                    self.autoctl(
                        "config", "set", "--pgdata", str(node.pgdata), name, value, tries=5
                    )
                self.autoctl("reload", "--pgdata", str(node.pgdata), tries=5)
        self._mark(f"cluster ready in {time.monotonic() - started:.1f}s")
        return self

    def _create_node(self, node: _Service) -> None:
        self._background(
            node,
            "create", "postgres", "--pgdata", str(node.pgdata),
            "--pgport", str(node.port), "--listen", "127.0.0.1",
            "--hostname", "127.0.0.1", "--name", node.name,
            "--auth", "trust", "--no-ssl", "--dbname", DBNAME,
            "--monitor", self.monitor_uri, "--pgctl", str(self.pg_bin / "pg_ctl"),
            "--run",
        )  # fmt: skip

    def _nudge_rebuild(self) -> None:
        """While a node is being rebuilt from the primary (a rejoin whose pg_rewind failed
        falls back to pg_basebackup: seen after a SIGKILL, "postgres single-user mode in
        target cluster failed"), end the base backup's spread checkpoint with an immediate
        one, at most once a second; 167 s of waiting were seen without it."""
        now = time.monotonic()
        if now - self._nudged < 1.0:
            return
        states = self.states()
        if not any(s.goal in ("catchingup", "wait_standby") and s.reported != s.goal
                   for s in states):  # fmt: skip
            return
        for state in states:
            if state.reported in ("primary", "wait_primary", "single"):
                self._nudged = now
                self._checkpoint(self.nodes[state.name])

    def _checkpoint(self, node: _Service) -> None:
        with (
            contextlib.suppress(psycopg.Error),
            psycopg.connect(
                self.node_url(node.name, "postgres"), autocommit=True, connect_timeout=2
            ) as conn,
        ):
            conn.execute("CHECKPOINT")

    # -- reading the monitor ---------------------------------------------------------------

    def _monitor(self) -> psycopg.Connection[Any]:
        return psycopg.connect(
            f"postgresql://{USER}@127.0.0.1:{self.monitor.port}/pg_auto_failover",
            autocommit=True,
            connect_timeout=3,
        )

    def _monitor_rows(self, query: str) -> list[tuple[Any, ...]] | None:
        try:
            with self._monitor() as conn:
                return conn.execute(query).fetchall()
        except psycopg.OperationalError:
            return None

    def states(self) -> list[NodeState]:
        """The data nodes as the monitor sees them ([] while it cannot be reached)."""
        rows = self._monitor_rows(
            "SELECT nodename, nodeport, reportedstate::text, goalstate::text, health "
            "FROM pgautofailover.node ORDER BY nodeid"
        )
        return [NodeState(*row) for row in rows or []]

    def events(self, count: int = 20) -> list[str]:
        rows = self._monitor_rows(
            "SELECT eventtime, nodename, reportedstate::text, goalstate::text, description "
            f"FROM pgautofailover.event ORDER BY eventid DESC LIMIT {int(count)}"
        )
        return [f"{t:%H:%M:%S.%f} {n} {r}->{g} {d}" for t, n, r, g, d in reversed(rows or [])]

    def healthy(self) -> bool:
        states = self.states()
        return (
            len(states) == 2
            and all(s.reported == s.goal for s in states)
            and sorted(s.reported for s in states) == ["primary", "secondary"]
        )

    def primary(self) -> str:
        """The name of the node the monitor has as primary (reported and goal)."""
        for state in self.states():
            if state.reported == state.goal == "primary":
                return state.name
        raise AssertionError(f"no primary: {self.describe()}")

    def secondary(self) -> str:
        for state in self.states():
            if state.reported == state.goal == "secondary":
                return state.name
        raise AssertionError(f"no secondary: {self.describe()}")

    def port(self, name: str) -> int:
        return self.nodes[name].port

    def node_url(self, name: str, dbname: str = DBNAME) -> str:
        """A URL to one node alone (not through the multi-host URL)."""
        return f"postgresql://{USER}@127.0.0.1:{self.nodes[name].port}/{dbname}"

    def describe(self) -> str:
        return "; ".join(str(s) for s in self.states()) or "monitor unreachable"

    # -- waiting -----------------------------------------------------------------------------

    def wait(
        self,
        condition: Callable[[], T],
        *,
        timeout: float,
        what: str,
        interval: float = 0.2,
        nudge: Callable[[], None] | None = None,
    ) -> T:
        """Poll ``condition`` until truthy; fail after ``timeout`` s with the logs' tails."""
        deadline = time.monotonic() + timeout
        while True:
            value = condition()
            if value:
                return value
            for service in [self.monitor, *self.nodes.values()]:
                if service.popen is not None and service.popen.poll() not in (None, 0):
                    if service.history and service.history[-1] in ("killed", "stopped"):
                        continue
                    raise AssertionError(
                        f"waiting for {what}: pg_autoctl of {service.name} exited with "
                        f"{service.popen.returncode}\n{self.log_tails()}"
                    )
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{what}: not within {timeout}s ({self.describe()})\n{self.log_tails()}"
                )
            if nudge is not None:
                nudge()
            time.sleep(interval)

    def wait_healthy(self, timeout: float = 120, nudge: Callable[[], None] | None = None) -> float:
        """Wait until both nodes are up, one primary and one secondary; seconds waited."""
        started = time.monotonic()
        self.wait(
            self.healthy,
            timeout=timeout,
            what="a primary and a secondary in sync",
            interval=0.25,
            nudge=nudge or self._nudge_rebuild,
        )
        took = time.monotonic() - started
        self._mark(f"healthy: {self.describe()} (waited {took:.1f}s)")
        return took

    # -- faults --------------------------------------------------------------------------

    def kill_node(self, name: str) -> float:
        """SIGKILL the node's process group (keeper and PostgreSQL, as if its host were
        lost); returns the time.time() of the kill."""
        node = self.nodes[name]
        assert node.popen is not None and node.popen.poll() is None, f"{name} is not running"
        at = time.time()
        os.killpg(node.popen.pid, signal.SIGKILL)
        node.history.append("killed")
        self._mark(f"SIGKILL {name} (pgid {node.popen.pid})")
        node.popen.wait(timeout=30)
        self._kill_postmaster(node)  # never needed so far: PostgreSQL is in the group
        return at

    def stop_node(self, name: str, *, wait: bool = True) -> float:
        """``pg_autoctl stop`` of the node; returns the time.time() it was asked."""
        node = self.nodes[name]
        at = time.time()
        node.history.append("stopped")
        self.autoctl("stop", "--pgdata", str(node.pgdata), timeout=60)
        if wait and node.popen is not None:
            try:
                node.popen.wait(timeout=60)
            except subprocess.TimeoutExpired as exc:
                raise AssertionError(
                    f"{name} still running 60 s after pg_autoctl stop\n{self.log_tails()}"
                ) from exc
        return at

    def switchover(self) -> tuple[float, subprocess.Popen[str]]:
        """Start ``pg_autoctl perform switchover`` (it returns once done); the time.time()
        it was started and its process (``.wait()`` it, or :meth:`finish_switchover`)."""
        at = time.time()
        popen = subprocess.Popen(
            ["pg_autoctl", "perform", "switchover", "--pgdata", str(self.monitor.pgdata)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            **self._as_postgres(),
        )
        self._mark("perform switchover")
        return at, popen

    def finish_switchover(self, popen: subprocess.Popen[str], timeout: float = 90) -> str:
        try:
            out, _ = popen.communicate(timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            popen.kill()
            popen.communicate()
            raise AssertionError(
                f"pg_autoctl perform switchover still running after {timeout}s\n{self.log_tails()}"
            ) from exc
        if popen.returncode != 0:
            raise AssertionError(
                f"pg_autoctl perform switchover exited with {popen.returncode}\n{out}\n"
                f"{self.log_tails()}"
            )
        return out

    def rejoin(self, name: str) -> None:
        """Run a stopped or killed node again; it rejoins as the secondary."""
        node = self.nodes[name]
        node.history.append("rejoined")
        self._background(node, "run", "--pgdata", str(node.pgdata))

    def running(self, name: str) -> bool:
        node = self.nodes[name]
        return node.popen is not None and node.popen.poll() is None

    # -- logs ------------------------------------------------------------------------------

    def log_tails(self, lines: int = 25) -> str:
        parts = []
        for path in sorted(self.logs.glob("*.log")):
            parts.append(_tail(path, lines))
        for service in [self.monitor, *self.nodes.values()]:
            pg_logs = sorted((service.pgdata / "log").glob("*.log"))
            if pg_logs:
                parts.append(_tail(pg_logs[-1], lines // 2))
        parts.append("--- monitor events\n" + "\n".join(self.events(15)))
        return "\n".join(parts)

    # -- teardown --------------------------------------------------------------------------

    def destroy(self) -> None:
        """Stop everything this rig started; leave no process or listening port behind."""
        services = [*self.nodes.values(), self.monitor]
        for service in services:
            if service.popen is not None and service.popen.poll() is None:
                with contextlib.suppress(subprocess.TimeoutExpired, AssertionError):
                    self.autoctl(
                        "stop", "--pgdata", str(service.pgdata), "--fast", timeout=20,
                        check=False,
                    )  # fmt: skip
        for service in services:
            if service.popen is None:
                continue
            try:
                service.popen.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(service.popen.pid, signal.SIGKILL)
                service.popen.wait(timeout=30)
        for service in services:
            self._kill_postmaster(service)
        self._kill_leftovers()
        busy = [s.port for s in services if _listening(s.port)]
        if os.environ.get("CODITY_KEEP_FAILOVER_RIG", "") in {"", "0"}:
            shutil.rmtree(self.base, ignore_errors=True)
        assert not busy, f"ports still listening after the rig's teardown: {busy}"

    def _kill_postmaster(self, service: _Service) -> None:
        """SIGKILL the PostgreSQL of ``service`` if it outlived its pg_autoctl."""
        pid_file = service.pgdata / "postmaster.pid"
        with contextlib.suppress(OSError, ValueError):
            pid = int(pid_file.read_text().splitlines()[0])
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if str(service.pgdata).encode() in cmdline:
                os.kill(pid, signal.SIGKILL)
                _wait_gone(pid)

    def _kill_leftovers(self) -> None:
        """SIGKILL any process still running from this rig's own folder (its unique path
        in the command line), e.g. a postgres whose postmaster.pid was already removed."""
        marker = str(self.base).encode()
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit() or int(proc.name) == os.getpid():
                continue
            with contextlib.suppress(OSError):
                if marker in (proc / "cmdline").read_bytes():
                    os.kill(int(proc.name), signal.SIGKILL)
                    _wait_gone(int(proc.name))

    def __enter__(self) -> AutoFailoverRig:
        try:
            return self.start()
        except BaseException:
            self.destroy()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.destroy()


def _tail(path: Path, lines: int) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"--- {path}: unreadable"
    return f"--- {path} (last {lines} lines)\n" + "\n".join(text[-lines:])


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _wait_gone(pid: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.05)


@contextlib.contextmanager
def autofailover_rig(**kwargs: Any) -> Iterator[AutoFailoverRig]:
    with AutoFailoverRig(**kwargs) as rig:
        yield rig
