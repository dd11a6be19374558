"""The command line speaks to people: a mistake is one line on stderr and exit 2.

Each case makes a mistake a newcomer makes — a wrong ``--app``, an unknown queue, a stopped
or unreachable database, a taken port — and checks the sentence, the exit code, and that no
traceback reached the terminal. Plus the small courtesies: ``db psql`` passes its arguments
on, ``status | head`` ends quietly, the log format follows the terminal.
"""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import psycopg

from codity.supervisor import codity_command
from tests.ports import free_port

CODITY = codity_command()


def _run(
    env: dict[str, str], *args: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CODITY, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120
    )


def _env(**settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CODITY_LOG_FORMAT")}
    env.update(settings)
    return env


def _one_line_exit_2(result: subprocess.CompletedProcess[str], text: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("codity: ")]
    assert len(lines) == 1 and text in lines[0], result.stderr


def test_a_wrong_app_is_one_line(tmp_path: Path, db_url: str) -> None:
    env = _env(DATABASE_URL=db_url)
    missing = _run(env, "worker", "--app", "myapp.tasks:registry", "--queue", "q", cwd=tmp_path)
    _one_line_exit_2(missing, "no module named 'myapp'")
    shape = _run(env, "worker", "--app", "myapp.tasks", "--queue", "q", cwd=tmp_path)
    _one_line_exit_2(shape, "--app must look like module:registry")
    (tmp_path / "tasks.py").write_text("registry = 42\n")
    wrong = _run(env, "worker", "--app", "tasks:registry", "--queue", "q", cwd=tmp_path)
    _one_line_exit_2(wrong, "'registry' is not a codity.worker.Registry")


def test_an_unknown_queue_is_one_line(tmp_path: Path, db_url: str) -> None:
    result = _run(
        _env(DATABASE_URL=db_url),
        "worker", "--app", "codity.worker.demo:registry", "--queue", "no-such-queue",
    )  # fmt: skip
    _one_line_exit_2(result, 'queue "no-such-queue" does not exist')


def test_a_badly_named_queue_or_project_is_one_line(db_url: str) -> None:
    env = _env(DATABASE_URL=db_url)
    app = ("worker", "--app", "codity.worker.demo:registry")
    _one_line_exit_2(_run(env, *app, "--queue", "a/b/c"), "NAME, PROJECT/NAME or PROJECT/*")
    _one_line_exit_2(
        _run(env, *app, "--queue", "no-such-project/mail"),
        'no project has the id or slug "no-such-project"',
    )


def test_an_unreachable_database_is_one_line(tmp_path: Path) -> None:
    url = f"postgresql://postgres@127.0.0.1:{free_port()}/codity"
    for command in (["migrate"], ["status"], ["demo"]):
        _one_line_exit_2(_run(_env(DATABASE_URL=url), *command), "cannot reach the database")


def test_a_stopped_embedded_database_is_said_so_and_left_stopped(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = _env(CODITY_HOME=str(home), CODITY_DB_PORT=str(free_port()))
    for command in (["status"], ["db", "psql", "-c", "select 1"]):
        _one_line_exit_2(_run(env, *command), "the embedded database is stopped")
    assert not (home / "pgdata").exists(), "nothing started a server"


def test_a_taken_web_port_fails_fast_for_web_and_up(tmp_path: Path, db_url: str) -> None:
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        env = _env(DATABASE_URL=db_url, CODITY_HOME=str(tmp_path / "home"))
        _one_line_exit_2(_run(env, "web", "--port", port), f"port {port} on 127.0.0.1 is taken")
        _one_line_exit_2(_run(env, "up", "--port", port), f"port {port} on 127.0.0.1 is taken")


def test_db_psql_passes_its_arguments_and_status_survives_a_closed_pipe(db_url: str) -> None:
    env = _env(DATABASE_URL=db_url)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT codity.create_queue('emails')")
    psql = _run(env, "db", "psql", "-X", "-t", "-A", "-c", "SELECT 40 + 2")
    assert "42" in psql.stdout  # DATABASE_URL set: psql from PATH, with the arguments
    piped = subprocess.run(
        f"{' '.join(CODITY)} status | head -1",
        shell=True,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert piped.returncode == 0 and piped.stdout.strip() == "Queues", piped
    assert "BrokenPipe" not in piped.stderr and "Traceback" not in piped.stderr, piped.stderr


def test_logs_are_json_lines_off_a_terminal_and_text_when_asked(db_url: str) -> None:
    env = _env(DATABASE_URL=db_url)
    auto = _run(env, "migrate")  # stderr is a pipe here: JSON lines
    assert auto.returncode == 0
    lines = [line for line in auto.stderr.splitlines() if line.strip()]
    assert lines and all(line.startswith("{") for line in lines), auto.stderr
    text = _run(env, "--log-format", "text", "migrate")
    assert text.stderr and not text.stderr.lstrip().startswith("{"), text.stderr
    assert " INFO codity." in text.stderr
