"""The wheel is a real package: built, installed in a fresh venv outside any checkout, it works.

The sources of ``codity`` live in py/ and its SQL in sql/ (DESIGN.md's layout); the wheel must
carry both, and the Swagger initializer, as package data read through the package itself —
nothing may climb out of the package to a checkout. The test builds the wheel from this
checkout, installs it (and its dependencies, from pip's cache after the first run) into a new
virtual environment, and from a folder that is not a checkout runs ``codity migrate``,
``codity demo``, one job through ``codity worker`` and a static file through ``codity web``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
import zipfile
from pathlib import Path

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.ports import free_port
from tests.processes import REPO_ROOT, wait_until


def _run(args: list[str], *, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, f"{args}: {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.mark.slow
def test_the_wheel_installs_outside_a_checkout_and_runs_migrate_demo_a_job_and_the_web(
    tmp_path: Path, db_url: str
) -> None:
    dist = tmp_path / "dist"
    _run(
        [sys.executable, "-m", "pip", "wheel", str(REPO_ROOT), "--no-deps", "-q", "-w", str(dist)],
        cwd=tmp_path,
    )
    [wheel] = list(dist.glob("codity-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for shipped in (
        "codity/py.typed",
        "codity/sql/migrations/0001_schema.sql",
        "codity/sql/functions/claim.sql",
        "codity/web/static/docs-init.js",
        "codity/worker/reporter.py",
    ):
        assert shipped in names, shipped

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path)
    _run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
         "--disable-pip-version-check", str(wheel)],
        cwd=tmp_path,
    )  # fmt: skip
    work = tmp_path / "elsewhere"  # not a checkout: nothing to find by climbing
    work.mkdir()
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHONPATH", "CODITY_SQL_DIR", "VIRTUAL_ENV")
    }
    env.update(DATABASE_URL=db_url, CODITY_HOME=str(work / ".codity"), PYTHONUNBUFFERED="1")
    codity = str(venv / "bin" / "codity")
    located = _run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "from codity.db.migrate import sql_dir; print(sql_dir())",
        ],
        cwd=work,
        env=env,
    )
    assert located.strip().startswith(str(venv)), located

    assert "migrated:" in _run([codity, "migrate"], cwd=work, env=env)
    assert "demo data seeded" in _run([codity, "demo"], cwd=work, env=env)

    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT codity.pause_queue('reports')")  # the demo's own jobs stay put
        (job,) = conn.execute(
            "SELECT job_id FROM codity.enqueue('emails', 'emails.send', %s)",
            [Jsonb({"to": "wheel@example.com", "failure_rate": 0})],
        ).fetchone() or (0,)
        log = (tmp_path / "worker.log").open("wb")
        worker = subprocess.Popen(
            [codity, "worker", "--app", "codity.worker.demo:registry", "--queue", "emails"],
            cwd=work,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_until(
                lambda: (
                    conn.execute(
                        "SELECT status = 'completed' FROM codity.jobs WHERE id = %s", [job]
                    ).fetchone()
                    == (True,)
                ),
                timeout=60,
                what="the installed worker completes a job",
            )
        finally:
            worker.send_signal(signal.SIGTERM)
            code = worker.wait(timeout=30)
            log.close()
        assert code == 0, (tmp_path / "worker.log").read_text()

    port = free_port()
    web = subprocess.Popen(
        [codity, "web", "--port", str(port)],
        cwd=work,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/docs/init.js") as r:
                    assert r.status == 200 and b"SwaggerUIBundle" in r.read()
                    break
            except OSError:
                assert time.monotonic() < deadline, "codity web from the wheel never answered"
                time.sleep(0.2)
    finally:
        web.send_signal(signal.SIGTERM)
        web.wait(timeout=30)


@pytest.mark.slow
def test_an_ordinary_editable_install_finds_its_sql_and_migrates(
    tmp_path: Path, db_url: str
) -> None:
    """``pip install -e .``, the first thing a contributor types (issue 29): setuptools'
    ordinary editable mode maps ``codity.sql`` to sql/ with an import hook that finds only a
    regular package there, so sql/ holds an ``__init__.py``; without it ``codity migrate``
    said "the codity.sql package data is missing: reinstall codity", and reinstalling the same
    way changed nothing."""
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path)
    _run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
         "--disable-pip-version-check", "-e", str(REPO_ROOT)],
        cwd=tmp_path,
    )  # fmt: skip
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHONPATH", "CODITY_SQL_DIR", "VIRTUAL_ENV")
    }
    env.update(DATABASE_URL=db_url, CODITY_HOME=str(work / ".codity"))
    located = _run(
        [str(venv / "bin" / "python"), "-c",
         "from codity.db.migrate import sql_dir; print(sql_dir())"],
        cwd=work,
        env=env,
    )  # fmt: skip
    assert Path(located.strip()) == REPO_ROOT / "sql", located
    assert "migrated:" in _run([str(venv / "bin" / "codity"), "migrate"], cwd=work, env=env)
    with psycopg.connect(db_url, autocommit=True) as conn:
        migrated = conn.execute("SELECT to_regproc('codity.enqueue_workflow') IS NOT NULL")
        assert migrated.fetchone() == (True,)
