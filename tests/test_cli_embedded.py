"""The ``codity`` command drives a real embedded PostgreSQL from nothing to migrated and back."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import psycopg

from codity.db.migrate import migration_ids
from codity.supervisor import codity_command
from tests.ports import free_port

CODITY = codity_command()


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CODITY, *args], env=env, capture_output=True, text=True, timeout=120)


def test_embedded_server_starts_migrates_and_stops(tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env |= {"CODITY_HOME": str(tmp_path / "home"), "CODITY_DB_PORT": str(port)}
    try:
        started = _run(env, "db", "start")
        assert started.returncode == 0, started.stderr
        url = f"postgresql://postgres@127.0.0.1:{port}/codity"
        assert url in started.stdout

        assert _run(env, "db", "status").returncode == 0
        assert _run(env, "db", "url").stdout.strip() == url
        # Starting again is a no-op, not an error.
        assert _run(env, "db", "start").returncode == 0

        first = _run(env, "migrate")
        assert first.returncode == 0, first.stderr
        assert f"{len(migration_ids())} new migration(s)" in first.stdout
        again = _run(env, "migrate")
        assert "0 new migration(s)" in again.stdout

        with psycopg.connect(url) as conn:
            version = conn.execute("SHOW server_version_num").fetchone()
            assert version is not None and int(version[0]) >= 150000
            row = conn.execute("SELECT count(*) FROM codity.queues").fetchone()
            assert row == (0,)
    finally:
        stopped = _run(env, "db", "stop")
    assert stopped.returncode == 0
    assert stopped.stdout.strip() == "stopped"
    assert _run(env, "db", "status").returncode == 3


def test_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
        env |= {"CODITY_HOME": str(tmp_path / "home"), "CODITY_DB_PORT": str(port)}
        result = _run(env, "db", "start")
    assert result.returncode == 2
    assert f"port {port} on 127.0.0.1 is taken" in result.stderr
    assert "CODITY_DB_PORT" in result.stderr


def test_database_url_overrides_the_embedded_server(tmp_path: Path) -> None:
    env = dict(os.environ) | {
        "DATABASE_URL": "postgresql://someone@db.example:5433/jobs",
        "CODITY_HOME": str(tmp_path / "home"),
    }
    result = _run(env, "db", "url")
    assert result.stdout.strip() == "postgresql://someone@db.example:5433/jobs"
    assert not (tmp_path / "home").exists()
