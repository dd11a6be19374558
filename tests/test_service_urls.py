"""Each Compose service under a login of its own (issue 29, item 5).

``codity migrate --service-logins`` migrates, makes the three logins as ``codity up`` does
(codity.db.service_logins) and writes each service's URL to
``CODITY_HOME/service-urls/<service>``, mode 0600; a process given ``DATABASE_URL_FILE``
connects with the URL in that file. docker-compose.yml runs its migrate service that way
and points the web app, the scheduler and the workers at their own files
(tests/test_compose.py proves it on Docker). Here: the files and their logins, a real
worker process that runs a job through its file and whose login is refused the job table,
and every way the setting can be wrong, each one sentence and exit 1 before connecting.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import psycopg
import pytest

from codity.config import load_settings
from codity.db.service_logins import SERVICES, URLS_FOLDER, login_name
from codity.supervisor import codity_command
from tests.processes import wait_until
from tests.sqlapi import create_queue


def _codity(
    *args: str, env: dict[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*codity_command(), *args], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)  # fmt: skip


def test_migrate_writes_each_services_url_and_a_worker_runs_on_its_own(
    tmp_path: Path, db_url: str, conn: psycopg.Connection
) -> None:
    env = {**os.environ, "DATABASE_URL": db_url, "CODITY_HOME": str(tmp_path)}
    env.pop("DATABASE_URL_FILE", None)
    done = _codity("migrate", "--service-logins", env=env)
    assert done.returncode == 0, done.stderr
    assert f"service logins: each service's URL in {tmp_path / URLS_FOLDER}" in done.stdout

    for service, role in SERVICES.items():
        path = tmp_path / URLS_FOLDER / service
        assert path.stat().st_mode & 0o777 == 0o600
        with psycopg.connect(path.read_text().strip(), autocommit=True) as own:
            row = own.execute(
                "SELECT current_user, pg_has_role(current_user, %s, 'MEMBER')", [role]
            ).fetchone()
            assert row == (login_name(service), True)

    # Run again: the same logins, the same passwords, nothing else changes.
    before = {s: (tmp_path / URLS_FOLDER / s).read_text() for s in SERVICES}
    assert _codity("migrate", "--service-logins", env=env).returncode == 0
    assert {s: (tmp_path / URLS_FOLDER / s).read_text() for s in SERVICES} == before

    # An operator's command under a service's login would see no project: it says so.
    status_env = {k: v for k, v in env.items() if k != "DATABASE_URL"}
    status_env["DATABASE_URL_FILE"] = str(tmp_path / URLS_FOLDER / "web")
    refused = _codity("status", env=status_env, timeout=30)
    assert refused.returncode == 2, refused.stdout
    assert "status reads every project, and codity_web_login sees one project's rows" in (
        refused.stderr
    )

    create_queue(conn, "by-file")
    row = conn.execute("SELECT job_id FROM codity.enqueue('by-file', 'bench.noop')").fetchone()
    assert row is not None
    job = int(row[0])
    worker_env = {k: v for k, v in env.items() if k != "DATABASE_URL"}
    worker_env["DATABASE_URL_FILE"] = str(tmp_path / URLS_FOLDER / "worker")
    log = tmp_path / "worker.log"
    with log.open("w") as out, subprocess.Popen(
        [*codity_command(), "worker", "--app", "codity.worker.demo:registry", "--queue", "by-file"],
        env=worker_env, stdout=subprocess.DEVNULL, stderr=out,
    ) as worker:  # fmt: skip
        try:
            wait_until(
                lambda: (
                    conn.execute(
                        "SELECT status::text FROM codity.jobs WHERE id = %s", [job]
                    ).fetchone()
                    == ("completed",)
                ),
                timeout=30,
                what="the job completed by the worker that read its URL from a file",
            )
            logins = conn.execute(
                "SELECT DISTINCT usename::text FROM pg_stat_activity"
                " WHERE application_name IN ('codity-worker', 'codity-listener')"
                " AND datname = pg_catalog.current_database()"
            ).fetchall()
            assert logins == [(login_name("worker"),)]
        finally:
            worker.terminate()
            assert worker.wait(timeout=30) == 0, log.read_text()
    worker_url = (tmp_path / URLS_FOLDER / "worker").read_text().strip()
    with (
        psycopg.connect(worker_url, autocommit=True) as own,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        own.execute("SELECT count(*) FROM codity.jobs")


def test_database_url_file_is_read_and_every_mistake_is_one_sentence(tmp_path: Path) -> None:
    url_file = tmp_path / "url"
    url_file.write_text("postgresql://someone@db.example:5432/codity\n")
    settings = load_settings({"DATABASE_URL_FILE": str(url_file), "CODITY_HOME": str(tmp_path)})
    assert settings.database_url == "postgresql://someone@db.example:5432/codity"

    empty = tmp_path / "empty"
    empty.write_text("\n")
    wrong = {
        "both": ({"DATABASE_URL": "postgresql://x@y/z", "DATABASE_URL_FILE": str(url_file)},
                 "set DATABASE_URL or DATABASE_URL_FILE, not both"),
        "missing": ({"DATABASE_URL_FILE": str(tmp_path / "nowhere")},
                    f"DATABASE_URL_FILE names {tmp_path / 'nowhere'}, which cannot be read"),
        "empty": ({"DATABASE_URL_FILE": str(empty)},
                  f"DATABASE_URL_FILE names {empty}, which is empty"),
    }  # fmt: skip
    for case, (env, sentence) in wrong.items():
        with pytest.raises(SystemExit) as raised:
            load_settings({**env, "CODITY_HOME": str(tmp_path)})
        assert sentence in str(raised.value), case
        # The same from the command line: one line on stderr, exit 1, no traceback.
        run_env = {k: v for k, v in os.environ.items()
                   if k not in ("DATABASE_URL", "DATABASE_URL_FILE")} | env  # fmt: skip
        done = _codity("status", env=run_env, timeout=30)
        assert done.returncode == 1, (case, done.stdout, done.stderr)
        assert sentence in done.stderr and "Traceback" not in done.stderr, (case, done.stderr)


def test_status_on_a_database_without_codity_says_to_migrate(pg_server_url: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL_FILE"}
    env["DATABASE_URL"] = pg_server_url  # the server's own database: never migrated
    done = _codity("status", env=env, timeout=30)
    assert done.returncode == 2, done.stdout
    assert "holds no Codity schema: run `codity migrate` first" in done.stderr
    assert "Traceback" not in done.stderr
