"""PGQueuer for the bench: its own virtual environment, its own scratch database, its client.

PGQueuer is a bench-only dependency: it is installed with pip into a virtual environment
of its own (``<CODITY_HOME>/bench/pgqueuer-venv``, made with the Python running Codity),
never into Codity's, and the bench drives it through processes of that environment's
Python: ``pgq install`` for its schema, and pgqueuer_worker.py (copied into the run's
scratch folder) for its workers and its producer.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

from codity.bench._node_env import PeerUnavailable
from codity.bench._workers import BenchError

__all__ = ["AGENT", "PGQUEUER_SPEC", "PgqEnv", "ensure_env", "ensure_peer_env", "pgq_database"]

log = logging.getLogger(__name__)

PGQUEUER_SPEC = "pgqueuer==1.6.*"
DRIVER_SPEC = "asyncpg"
AGENT = "pgqueuer_worker"
"""The agent's module name in the scratch folder, where its processes run."""
_VERSION = "import importlib.metadata as m; print(m.version('pgqueuer'))"


@dataclass(frozen=True, slots=True)
class PgqEnv:
    """PGQueuer's environment and the scratch folder its processes run in."""

    venv: Path
    version: str
    work: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def pgq(self) -> Path:
        return self.venv / "bin" / "pgq"

    def env(self, dsn: str, **extra: str) -> dict[str, str]:
        """The process environment: PGDSN, and nothing of Codity's virtual environment."""
        base = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "PYTHONPATH"}}
        return base | {"PGDSN": dsn, "PYTHONPATH": str(self.work)} | extra

    def client(self, dsn: str, *args: str) -> dict[str, Any]:
        """Run the agent's producer (``enqueue`` or ``pickup``) and return its JSON line."""
        run = subprocess.run(
            [str(self.python), str(self.work / f"{AGENT}.py"), *args],
            env=self.env(dsn),
            cwd=self.work,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        if run.returncode != 0:
            raise BenchError(f"PGQueuer client {args[0]} failed:\n{run.stderr[-3000:]}")
        result: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
        return result


def _installed_version(python: Path) -> str | None:
    if not python.exists():
        return None
    run = subprocess.run([str(python), "-c", _VERSION], capture_output=True, text=True,
                         check=False)  # fmt: skip
    return run.stdout.strip() if run.returncode == 0 else None


def ensure_env(home: Path, work: Path) -> PgqEnv:
    """PGQueuer 1.6 in its own virtual environment, created on first use; the agent copied."""
    venv = home / "bench" / "pgqueuer-venv"
    python = venv / "bin" / "python"
    version = _installed_version(python)
    if version is None or not version.startswith("1.6."):
        log.info("installing %s and %s into %s", PGQUEUER_SPEC, DRIVER_SPEC, venv)
        shutil.rmtree(venv, ignore_errors=True)
        venv.parent.mkdir(parents=True, exist_ok=True)
        steps = [
            [sys.executable, "-m", "venv", str(venv)],
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             PGQUEUER_SPEC, DRIVER_SPEC],
        ]  # fmt: skip
        for step in steps:
            run = subprocess.run(step, capture_output=True, text=True, timeout=600, check=False)
            if run.returncode != 0:
                raise BenchError(f"could not install PGQueuer ({step[2]}):\n{run.stderr[-3000:]}")
        version = _installed_version(python)
        if version is None:
            raise BenchError(f"PGQueuer is not importable from {venv}")
    shutil.copyfile(Path(__file__).with_name(f"{AGENT}.py"), work / f"{AGENT}.py")
    return PgqEnv(venv=venv, version=version, work=work)


def ensure_peer_env(home: Path, work: Path) -> PgqEnv:
    """ensure_env for a run beside other peers: a PGQueuer that cannot be installed is
    PeerUnavailable, one sentence in the report, and the other systems still run."""
    try:
        return ensure_env(home, work)
    except BenchError as exc:
        reason = str(exc).splitlines()[0].rstrip(":")
        raise PeerUnavailable(f"PGQueuer ({PGQUEUER_SPEC}) was not run: {reason}.") from exc


@contextmanager
def pgq_database(url: str, pgq: PgqEnv) -> Iterator[str]:
    """A new database on ``url``'s server with PGQueuer's schema (``pgq install``), dropped
    on exit; yields its URL."""
    name = f"codity_bench_pgq_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        parts = urlsplit(url)
        scratch = urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, ""))
        run = subprocess.run([str(pgq.pgq), "install"], env=pgq.env(scratch), cwd=pgq.work,
                             capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
        if run.returncode != 0:
            raise BenchError(f"pgq install failed:\n{run.stdout}\n{run.stderr[-3000:]}")
        yield scratch
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
            admin.execute(drop.format(sql.Identifier(name)))
