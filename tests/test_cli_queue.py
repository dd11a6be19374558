"""``codity queue NAME``: a queue's weight, limits and lease from the command line.

The CLI face of codity.create_queue (issue 26 asked for the weight in SQL, the API, the CLI
and the dashboard): settings given change, the others keep their values, the result is
printed, and a refusal is one line, exit 2, with nothing written.
"""

from __future__ import annotations

import os
import subprocess

import psycopg

from codity.supervisor import codity_command
from tests.sqlapi import row

CODITY = codity_command()


def _codity(db_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CODITY_LOG_FORMAT"}
    env["DATABASE_URL"] = db_url
    return subprocess.run(
        [*CODITY, *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_queue_is_made_changed_shown_and_paused(db_url: str, conn: psycopg.Connection) -> None:
    made = _codity(db_url, "queue", "mail", "--weight", "3", "--max-running", "20")
    assert made.returncode == 0, made.stderr
    assert "queue mail" in made.stdout and ": created" in made.stdout, made.stdout
    assert "weight        3" in made.stdout and "max running   20" in made.stdout, made.stdout

    changed = _codity(db_url, "queue", "mail", "--rate-limit", "50", "--pause")
    assert changed.returncode == 0, changed.stderr
    assert ": settings" in changed.stdout and "rate limit    50 per 1s" in changed.stdout
    assert "state         paused" in changed.stdout, changed.stdout
    assert row(
        conn,
        "SELECT weight, max_running, rate_limit, is_paused FROM codity.queues WHERE name = 'mail'",
    ) == (3, 20, 50, True)

    status = _codity(db_url, "status")
    header = next(line for line in status.stdout.splitlines() if line.startswith("queue "))
    assert "weight" in header.split(), status.stdout
    assert any(line.split()[:3] == ["mail", "paused", "3"] for line in status.stdout.splitlines())


def test_a_refused_setting_is_one_line_and_writes_nothing(
    db_url: str, conn: psycopg.Connection
) -> None:
    assert _codity(db_url, "queue", "mail", "--weight", "2").returncode == 0
    for args, said in (
        (["--weight", "0", "--max-running", "5"], "weight must be from 1 to 1000, got 0 [CD010]"),
        (["--project", "nowhere", "--weight", "4"], 'no project has the id or slug "nowhere"'),
    ):
        refused = _codity(db_url, "queue", "mail", *args)
        assert refused.returncode == 2, (refused.returncode, refused.stderr)
        assert "Traceback" not in refused.stderr and said in refused.stderr, refused.stderr
    assert row(conn, "SELECT weight, max_running FROM codity.queues WHERE name = 'mail'") == (
        2,
        None,
    )
    assert row(conn, "SELECT count(*) FROM codity.queues") == (1,)
