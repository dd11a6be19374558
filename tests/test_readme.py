"""The README's examples run as written, and so do docs/SQL_API.md's.

Each block is read from the file itself (never copied into the test), so an edit that
breaks an example breaks this test:

- the SQL walkthrough through psql, on a database holding the demo data set (what a reader
  has after ``./codity up --demo``);
- the Python example as a real package ``myapp/`` in a folder of its own, enqueued into by
  the second block and run by the README's ``codity worker`` command from that folder;
- the curl sequence with bash against a running ``codity web`` on the demo data;
- every ``Example:`` of docs/SQL_API.md and its introduction's block, each in a transaction
  rolled back afterwards, on the demo data: it may fail only with one of the API's own
  SQLSTATEs (an id that names nothing here, CD0xx) — never with a syntax error, an unknown
  function or a wrong argument.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from codity.db.embedded import wheel_bin_dir
from codity.demo import seed_demo
from tests.ports import free_port
from tests.processes import CODITY, REPO_ROOT, wait_until

README = REPO_ROOT / "README.md"
SQL_API = REPO_ROOT / "docs" / "SQL_API.md"
_BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.M | re.S)


def blocks(path: Path) -> list[tuple[str, str]]:
    return [(m[1], m[2]) for m in _BLOCK.finditer(path.read_text())]


def readme_block(language: str, marker: str) -> str:
    found = [text for lang, text in blocks(README) if lang == language and marker in text]
    assert len(found) == 1, f"README: one {language} block containing {marker!r}"
    return found[0]


def _psql() -> str:
    return shutil.which("psql") or str(wheel_bin_dir() / "psql")


def test_the_readme_sql_walkthrough_runs_in_psql_beside_the_demo(db_url: str) -> None:
    seed_demo(db_url)
    walkthrough = readme_block("sql", "create_queue('readme'")
    done = subprocess.run(
        [_psql(), db_url, "-X", "-v", "ON_ERROR_STOP=1", "-f", "-"],
        input=walkthrough,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "completed" in done.stdout and '{"sent": true}' in done.stdout, done.stdout


def test_the_readme_workflow_runs_in_psql(db_url: str) -> None:
    """The workflow block, after the walkthrough (it uses its queue): the two roots complete
    in one call, and only then is publish claimable, with both parents completed."""
    walkthrough = readme_block("sql", "create_queue('readme'")
    workflow = readme_block("sql", "enqueue_workflow(")
    done = subprocess.run(
        [_psql(), db_url, "-X", "-v", "ON_ERROR_STOP=1", "-f", "-"],
        input=walkthrough + workflow,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert " fetch    | completed" in out and " resize   | completed" in out, out


def test_create_queue_in_the_walkthrough_changes_only_what_it_names(db_url: str) -> None:
    seed_demo(db_url)
    with psycopg.connect(db_url, autocommit=True) as conn:
        columns = [
            d.name for d in conn.execute("SELECT * FROM codity.queues LIMIT 0").description or ()
        ]
        before = conn.execute("SELECT * FROM codity.queues WHERE name = 'emails'").fetchone()
        attempts = int(before[columns.index("max_attempts")]) + 1 if before else 5
        conn.execute(
            "SELECT * FROM codity.create_queue('emails', p_max_attempts => %s)", [attempts]
        )
        after = conn.execute("SELECT * FROM codity.queues WHERE name = 'emails'").fetchone()
    assert before is not None and after is not None
    changed = {c for c, a, b in zip(columns, before, after, strict=True) if a != b}
    assert changed == {"max_attempts", "updated_at"}


def test_the_readme_python_example_runs_as_a_worker_from_its_own_folder(
    tmp_path: Path, db_url: str
) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT codity.create_queue('emails')")
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (tmp_path / "myapp" / "tasks.py").write_text(readme_block("python", "# myapp/tasks.py"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(DATABASE_URL=db_url, CODITY_HOME=str(tmp_path / "home"), PYTHONUNBUFFERED="1")
    enqueue = readme_block("python", "send_email.enqueue") + "\nprint(job_id)\n"
    made = subprocess.run(
        [str(Path(CODITY[0]).with_name("python")), "-c", enqueue],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    job = int(made.stdout.strip())

    command = readme_block("sh", "--app myapp.tasks:registry").strip()
    assert command.startswith("./codity worker ")
    args = command.removeprefix("./codity ").split()
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [*CODITY, *args], cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        with psycopg.connect(db_url, autocommit=True) as conn:
            wait_until(
                lambda: conn.execute(
                    "SELECT result FROM codity.get_job(%s) WHERE job_status = 'completed'", [job]
                ).fetchone(),
                timeout=60,
                what="the README's worker completes the README's job",
            )
            (result,) = conn.execute("SELECT result FROM codity.get_job(%s)", [job]).fetchone() or (
                None,
            )
        assert result == {"sent": True}
    finally:
        worker.send_signal(signal.SIGTERM)
        code = worker.wait(timeout=30)
    assert code == 0, log.read_text()


def test_the_readme_curl_sequence_signs_in_and_enqueues(tmp_path: Path, db_url: str) -> None:
    seed_demo(db_url)
    port = free_port()
    env = dict(os.environ, DATABASE_URL=db_url, CODITY_HOME=str(tmp_path / "home"))
    web = subprocess.Popen(
        [*CODITY, "web", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz") as ready:
                    if ready.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "codity web never became ready"
            time.sleep(0.2)
        script = readme_block("sh", "TOKEN=$(curl").replace("localhost:3000", f"127.0.0.1:{port}")
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        web.send_signal(signal.SIGTERM)
        web.wait(timeout=30)
    assert done.returncode == 0, done.stderr
    compact = done.stdout.replace(" ", "")
    assert '"task":"emails.send"' in compact and '"status":"queued"' in compact, done.stdout
    assert '"kind":"workflow"' in compact and '"node_key":"receipt"' in compact, done.stdout
    assert '"status":"waiting"' in compact, "receipt waits for send"


def test_the_readme_python_workflow_and_batch_are_enqueued(tmp_path: Path, db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT codity.create_queue('images')")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(DATABASE_URL=db_url, CODITY_HOME=str(tmp_path / "home"))
    made = subprocess.run(
        [str(Path(CODITY[0]).with_name("python")), "-c", readme_block("python", "Workflow(")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    with psycopg.connect(db_url, autocommit=True) as conn:
        nodes = conn.execute(
            "SELECT w.kind, j.node_key, j.status::text FROM codity.jobs j"
            " JOIN codity.workflows w ON w.id = j.workflow_id ORDER BY j.id"
        ).fetchall()
    assert nodes[:3] == [
        ("workflow", "fetch", "queued"),
        ("workflow", "resize", "queued"),
        ("workflow", "publish", "waiting"),
    ]
    assert sorted(nodes[3:], key=str) == [
        ("batch", "all_done", "waiting"),
        ("batch", None, "queued"),
        ("batch", None, "queued"),
        ("batch", None, "queued"),
    ]


def _sql_api_examples() -> list[str]:
    text = SQL_API.read_text()
    examples = re.findall(r"^Example:\n\n```sql\n(.*?)^```", text, re.M | re.S)
    intro = blocks(SQL_API)[0][1]
    return [intro, *examples]


SQL_API_EXAMPLES = _sql_api_examples()


@pytest.fixture(scope="module")
def demo_url(pg_server_url: str, template_url: str) -> Iterator[str]:
    from tests.conftest import TEMPLATE, clone_database, drop_database

    name, url = clone_database(pg_server_url, TEMPLATE)
    seed_demo(url)
    yield url
    drop_database(pg_server_url, name)


@pytest.mark.parametrize(
    "example", SQL_API_EXAMPLES, ids=[f"example-{i}" for i in range(len(SQL_API_EXAMPLES))]
)
def test_every_sql_api_example_runs_or_fails_only_with_a_codity_sqlstate(
    demo_url: str, example: str
) -> None:
    with psycopg.connect(demo_url) as conn:
        try:
            for statement in filter(None, (s.strip() for s in example.split(";\n"))):
                conn.execute(statement.rstrip(";").encode())
        except psycopg.Error as exc:
            assert (exc.sqlstate or "").startswith("CD"), f"{example}\n→ {exc.sqlstate}: {exc}"
        finally:
            conn.rollback()
