"""``codity up`` says "Codity is up" only once every part answers, and runs each part under
a login of its own (issue 29, items 2 and 5).

At the moment the line is printed, the web app serves /livez, every worker is registered and
the scheduler has ticked; it used to print as it started its children, about a second
before the web app listened, so a request in that second was refused. Break it: call
``announce()`` in ``_cmd_up`` before ``Supervisor.run`` — /livez is refused at the line and
no worker is registered yet.

The web app, the scheduler and the workers connect as ``codity_web_login``,
``codity_scheduler_login`` and ``codity_worker_login`` (codity.db.service_logins), never as
the login that migrated, and each is refused what its role does not hold.
"""

from __future__ import annotations

import os
import signal
import subprocess
import urllib.request
from pathlib import Path

import psycopg
import pytest

from codity.db.service_logins import login_name, service_urls
from codity.supervisor import codity_command
from tests.ports import free_port
from tests.sqlapi import one


def _livez(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/livez", timeout=2) as answer:
            return int(answer.status)
    except OSError as exc:
        return -1 if not hasattr(exc, "code") else int(exc.code)


def test_up_says_it_is_up_when_the_web_app_the_workers_and_the_scheduler_answer(
    tmp_path: Path, db_url: str, conn: psycopg.Connection
) -> None:
    conn.execute("SELECT codity.create_queue('ready')")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("CODITY_LOG_FORMAT",)}
    env.update(DATABASE_URL=db_url, CODITY_HOME=str(tmp_path / "home"), PYTHONUNBUFFERED="1")
    up = subprocess.Popen(
        [*codity_command(), "up", "--workers", "2", "--queue", "ready", "--port", str(port),
         "--tick-ms", "200"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )  # fmt: skip
    seen: list[str] = []
    logins: dict[str, set[str]] = {}
    try:
        assert up.stdout is not None
        for line in up.stdout:
            seen.append(line)
            if line.startswith("Codity is up"):
                at_the_line = (
                    _livez(port),
                    one(conn, "SELECT count(*) FROM codity.workers WHERE status = 'active'"),
                )
                for app, user in conn.execute(
                    "SELECT application_name, usename FROM pg_stat_activity"
                    " WHERE application_name LIKE 'codity-%' AND datname = current_database()"
                ).fetchall():
                    logins.setdefault(app, set()).add(user)
                break
        else:
            raise AssertionError(f"codity up ended without saying it was up: {seen}")
    finally:
        os.killpg(up.pid, signal.SIGTERM)
        up.wait(timeout=60)
        if up.stdout is not None:
            up.stdout.close()
    assert at_the_line == (200, 2), seen
    assert any(line.startswith("starting the web app") for line in seen), seen
    assert logins == {
        "codity-web": {login_name("web")},
        "codity-scheduler": {login_name("scheduler")},
        "codity-worker": {login_name("worker")},
        "codity-listener": {login_name("worker")},
    }, logins


REFUSED = [
    ("worker", "SELECT count(*) FROM codity.jobs"),
    ("worker", "SELECT count(*) FROM codity.users"),
    ("web", "DELETE FROM codity.job_executions"),
    ("web", "CREATE TABLE codity.mine (x int)"),
    ("scheduler", "TRUNCATE codity.jobs"),
    ("scheduler", "UPDATE codity.job_transitions SET by_what = 'x'"),
]


@pytest.mark.parametrize(("service", "statement"), REFUSED)
def test_each_services_login_is_refused_what_its_role_does_not_hold(
    tmp_path: Path, db_url: str, conn: psycopg.Connection, service: str, statement: str
) -> None:
    url = service_urls(db_url, tmp_path)[service]
    assert f"{login_name(service)}:" in url
    with psycopg.connect(url, autocommit=True) as own:
        assert own.execute(
            "SELECT current_user, rolsuper FROM pg_roles WHERE rolname = current_user"
        ).fetchone() == (login_name(service), False)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            own.execute(statement)
    assert (tmp_path / "service_logins").stat().st_mode & 0o777 == 0o600
