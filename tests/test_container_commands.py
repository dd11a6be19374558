"""The two commands docker-compose.yml leans on, checked in the default run (the compose
test itself needs a Docker engine: ``./test -m docker``):

- ``codity demo --if-empty``: the migrate service seeds the demo at the first ``up`` and
  never again, so a restart keeps what operators did;
- ``codity alive`` (and ``python -m codity.health_file``, the form the compose file's
  healthchecks run): true while CODITY_HEALTH_FILE was marked lately — by the real
  scheduler here, after each tick the database accepted.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg

from codity.supervisor import codity_command
from tests.processes import Processes, wait_until

CODITY = codity_command()


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CODITY, *args], env=env, capture_output=True, text=True, timeout=120)


def _module(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    python = Path(sys.executable)
    return subprocess.run(
        [str(python), "-m", "codity.health_file", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _env(**settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CODITY_HEALTH_FILE")}
    return {**env, "CODITY_LOG_FORMAT": "text", **settings}


def test_demo_if_empty_seeds_once_and_then_keeps_the_data(db_url: str) -> None:
    env = _env(DATABASE_URL=db_url)
    first = _run(env, "demo", "--if-empty")
    assert first.returncode == 0 and "demo data seeded" in first.stdout, first.stderr
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT * FROM codity.pause_queue('emails')")
        jobs = conn.execute("SELECT count(*) FROM codity.jobs").fetchone()

    again = _run(env, "demo", "--if-empty")
    assert again.returncode == 0, again.stderr
    assert "demo data not seeded: the default project already has queues" in again.stdout
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM codity.jobs").fetchone() == jobs
        paused = conn.execute("SELECT is_paused FROM codity.queues WHERE name = 'emails'")
        assert paused.fetchone() == (True,)  # a reset would have resumed it


def test_alive_follows_the_scheduler_s_ticks(tmp_path: Path, db_url: str) -> None:
    marked = tmp_path / "alive"
    env = _env(DATABASE_URL=db_url, CODITY_HEALTH_FILE=str(marked))

    unset = _run(_env(), "alive")
    assert unset.returncode == 2 and "CODITY_HEALTH_FILE is not set" in unset.stderr
    never = _run(env, "alive")
    assert never.returncode == 1 and "nothing marked" in never.stderr

    with Processes(tmp_path, db_url, CODITY_HEALTH_FILE=str(marked)) as procs:
        scheduler = procs.scheduler()
        wait_until(
            marked.exists, timeout=30, what="the scheduler marks its first tick", alive=[scheduler]
        )
        before = marked.stat().st_mtime
        wait_until(
            lambda: marked.stat().st_mtime > before, timeout=30, what="a later tick marks it"
        )
        fresh = _run(env, "alive", "--within", "20")
        assert fresh.returncode == 0 and fresh.stdout.startswith("alive"), fresh.stderr
        module = _module(env, "--within", "20")  # docker-compose.yml's lighter form
        assert module.returncode == 0 and module.stdout.startswith("alive"), module.stderr
        scheduler.send(signal.SIGTERM)
        assert scheduler.wait(timeout=30) == 0

    stale = time.time() - 60
    os.utime(marked, (stale, stale))
    old = _run(env, "alive", "--within", "20")
    assert old.returncode == 1 and "last success 60s ago (allowed 20s)" in old.stderr
    old = _module(env, "--within", "20")
    assert old.returncode == 1 and "last success 60s ago (allowed 20s)" in old.stderr
    unset = _module(_env(), "--within", "20")
    assert unset.returncode == 2 and "CODITY_HEALTH_FILE is not set" in unset.stderr
