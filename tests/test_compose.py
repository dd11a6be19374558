"""docker-compose.yml on a real Docker engine: the seed's three promises, with both Compose
implementations the file must work with (Compose v2's ``docker compose`` and docker-compose
1.29).

- ``up --scale worker=3``: three workers compete for the same jobs and none runs twice;
- ``docker kill`` of the worker running a job: the sweep declares it dead, the reaper
  requeues the job with the attempt refunded, another worker completes it once;
- ``docker compose stop``: every container exits 0, the workers drain, no attempt is charged.

No image registry is reachable here, so tests/compose/build_images.sh builds a Debian base
image (debootstrap) for BASE_IMAGE and a PostgreSQL 15 image on it for POSTGRES_IMAGE, the
substitutes docker-compose.yml documents; Codity's own image is built from the Dockerfile
by Compose. scripts/compose_prereqs.sh installs and starts what is missing first (a Docker
engine, both Compose implementations, debootstrap). Run with ``./test -m docker``.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from codity.demo import DEMO_OPERATOR_EMAIL, DEMO_OPERATOR_PASSWORD
from tests.ports import free_port
from tests.processes import wait_until

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parent.parent
BASE_IMAGE = "codity-test/base:bookworm"
POSTGRES_IMAGE = "codity-test/postgres:15"
CODITY_IMAGE = "codity-test/codity:latest"
COMPOSE = {"compose-v2": ["docker", "compose"], "docker-compose-1.29": ["docker-compose"]}
# .env.example as it is, but for the images, free host ports, demo jobs that never fail on
# purpose, and a drain short enough for the stop test to see jobs outlive it.
ENV_FILE = ROOT / ".env.example"
SETTINGS = {
    "BASE_IMAGE": BASE_IMAGE,
    "POSTGRES_IMAGE": POSTGRES_IMAGE,
    "CODITY_IMAGE": CODITY_IMAGE,
    "CODITY_DEMO_FAILURE_RATE": "0",
    "SHUTDOWN_GRACE_MS": "3000",
    # Docker's address pools: the Compose network's gateway, whom docker-proxy's
    # connections come from, is trusted to name the client (issue 29, item 8).
    "CODITY_TRUSTED_PROXIES": "172.16.0.0/12,192.168.0.0/16",
}


def _env(**settings: str) -> dict[str, str]:
    """This process's PATH and Docker address, and ``settings``: nothing else of this shell
    reaches Compose (the shell's variables would override .env.example's)."""
    kept = {k: os.environ[k] for k in ("PATH", "HOME", "DOCKER_HOST") if k in os.environ}
    return {**kept, **SETTINGS, **settings}


def _example_setting(name: str) -> str:
    for line in ENV_FILE.read_text().splitlines():
        if line.startswith(f"{name}="):
            return line.partition("=")[2]
    raise AssertionError(f"{name} is not in .env.example")


def _run(args: list[str], *, timeout: float, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise AssertionError(
            f"{' '.join(args)} exited with {done.returncode}\n{done.stdout}\n{done.stderr}"
        )
    return done.stdout


@pytest.fixture(scope="session")
def engine() -> None:
    """A Docker engine, both Compose implementations and the two substitute images."""
    _run([str(ROOT / "scripts" / "compose_prereqs.sh")], timeout=600)
    _run([str(ROOT / "tests" / "compose" / "build_images.sh")], timeout=900)


class Stack:
    """One Compose project of docker-compose.yml, on free host ports, removed afterwards."""

    def __init__(self, compose: list[str]) -> None:
        self.project = f"codity-test-{uuid.uuid4().hex[:8]}"
        db_port, web_port = free_port(), free_port()
        self.env = _env(CODITY_DB_HOST_PORT=str(db_port), CODITY_WEB_HOST_PORT=str(web_port))
        self.web = f"http://127.0.0.1:{web_port}"
        # .env.example, not a developer's .env in the checkout.
        self.command = [*compose, "--env-file", str(ENV_FILE), "-p", self.project]
        password = _example_setting("POSTGRES_PASSWORD")
        self.url = f"postgresql://postgres:{password}@127.0.0.1:{db_port}/codity"

    def compose(self, *args: str, timeout: float = 300) -> str:
        return _run([*self.command, *args], timeout=timeout, env=self.env)

    def containers(self, service: str) -> list[str]:
        return self.compose("ps", "-q", service).split()

    def inspect(self, container: str, template: str) -> str:
        return _run(["docker", "inspect", "-f", template, container], timeout=30).strip()

    def connect(self) -> psycopg.Connection[tuple[Any, ...]]:
        return psycopg.connect(self.url, autocommit=True, connect_timeout=5)

    def value(self, query: str, params: list[Any] | None = None) -> Any:
        with self.connect() as conn:
            row = conn.execute(query, params).fetchone()
        return row[0] if row else None

    def rows(self, query: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
        with self.connect() as conn:
            return conn.execute(query, params).fetchall()

    def up(self, workers: int) -> None:
        """Start every service, then wait until each worker container has registered and
        the web app's healthcheck passes (docker-compose 1.29 has no ``up --wait``)."""
        self.compose("up", "-d", "--scale", f"worker={workers}", timeout=600)
        hosts = {self.hostname(c) for c in self.containers("worker")}
        assert len(hosts) == workers
        wait_until(
            lambda: (
                self._db_answers()
                and self.value(
                    "SELECT count(DISTINCT host) FROM codity.workers WHERE status = 'active' "
                    "AND host = ANY(%s)",
                    [list(hosts)],
                )
                == workers
            ),
            timeout=120,
            what=f"{workers} worker container(s) register",
            interval=0.5,
        )
        # Every long-running container has a healthcheck: web asks /healthz, the worker and
        # the scheduler `codity alive` (a heartbeat or tick the database accepted lately).
        for service in ("postgres", "web", "scheduler", "worker"):
            for container in self.containers(service):
                wait_until(
                    functools.partial(self.healthy, container),
                    timeout=120,
                    what=f"the {service} container's healthcheck passes",
                    interval=0.5,
                )

    def healthy(self, container: str) -> bool:
        return self.inspect(container, "{{.State.Health.Status}}") == "healthy"

    def _db_answers(self) -> bool:
        try:
            self.value("SELECT 1")
        except psycopg.OperationalError:
            return False
        return True

    def hostname(self, container: str) -> str:
        return self.inspect(container, "{{.Config.Hostname}}")

    def enqueue(self, payloads: list[dict[str, Any]]) -> list[int]:
        with self.connect() as conn, conn.transaction():
            return [
                conn.execute(
                    "SELECT job_id FROM codity.enqueue('emails', 'emails.send', %s)",
                    [Jsonb({"failure_rate": 0, **payload})],
                ).fetchone()[0]  # type: ignore[index]
                for payload in payloads
            ]

    def logs(self) -> str:
        try:
            return self.compose("logs", "--no-color", "--tail", "40", timeout=60)
        except (AssertionError, subprocess.TimeoutExpired) as exc:
            return f"(no logs: {exc})"

    def down(self) -> None:
        self.compose("down", "-v", "--remove-orphans", "-t", "5", timeout=180)


@pytest.fixture(scope="module", params=list(COMPOSE))
def compose(request: pytest.FixtureRequest, engine: None) -> list[str]:
    """Each implementation builds Codity's image from the Dockerfile itself, once."""
    command = COMPOSE[request.param]
    _run([*command, "--env-file", str(ENV_FILE), "build", "migrate"], timeout=900, env=_env())
    return command


@pytest.fixture
def stack(compose: list[str]) -> Iterator[Stack]:
    stack = Stack(compose)
    try:
        yield stack
    finally:
        print(stack.logs())  # pytest shows it only when the test failed
        stack.down()


def _executions(stack: Stack, jobs: list[int]) -> list[tuple[Any, ...]]:
    return stack.rows(
        "SELECT e.job_id, e.execution_seq, e.attempt, w.host, e.status::text, "
        "e.attempt_refunded FROM codity.job_executions e "
        "LEFT JOIN codity.workers w ON w.id = e.worker_id "
        "WHERE e.job_id = ANY(%s) ORDER BY e.job_id, e.execution_seq",
        [jobs],
    )


def _all_finished(stack: Stack, jobs: list[int]) -> bool:
    return bool(
        stack.value(
            "SELECT count(*) = %s FROM codity.jobs WHERE id = ANY(%s) AND status = 'completed'",
            [len(jobs), jobs],
        )
    )


def _sign_in(stack: Stack, client_ip: str, password: str) -> int:
    request = urllib.request.Request(
        f"{stack.web}/api/v1/auth/login",
        data=json.dumps({"email": DEMO_OPERATOR_EMAIL, "password": password}).encode(),
        headers={"content-type": "application/json", "X-Forwarded-For": client_ip},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_three_scaled_workers_share_the_jobs_and_none_runs_twice(stack: Stack) -> None:
    stack.up(workers=3)
    # The published web port serves the API, and the demo login the README gives works.
    login = urllib.request.Request(
        f"{stack.web}/api/v1/auth/login",
        data=json.dumps(
            {"email": DEMO_OPERATOR_EMAIL, "password": DEMO_OPERATOR_PASSWORD}
        ).encode(),
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(login, timeout=30) as answer:
        assert answer.status == 200 and json.load(answer)["data"]["access_token"]
    # Behind the trusted gateway, X-Forwarded-For names the client: five failed sign-ins
    # lock out their client only, not every client on the host (all of them one IP to web
    # through docker-proxy otherwise).
    assert [_sign_in(stack, "10.9.9.1", "wrong") for _ in range(6)] == [401] * 5 + [429]
    assert _sign_in(stack, "10.9.9.2", DEMO_OPERATOR_PASSWORD) == 200
    hosts = {stack.hostname(c) for c in stack.containers("worker")}
    jobs = stack.enqueue([{"to": f"scale{i}@example.com", "duration_s": 0.05} for i in range(300)])
    wait_until(
        lambda: _all_finished(stack, jobs), timeout=120, what="300 jobs complete", interval=0.5
    )

    executions = _executions(stack, jobs)
    # Exactly one attempt per job, completed, never refunded or repeated...
    assert Counter((e[1], e[2], e[4], e[5]) for e in executions) == {
        (1, 1, "completed", False): 300
    }
    assert sorted(e[0] for e in executions) == sorted(jobs)
    # ...and all three worker containers took part.
    by_host = Counter(e[3] for e in executions)
    assert set(by_host) == hosts, by_host
    print(f"\n[compose scale] jobs per worker container: {dict(by_host)}")
    # Each service under its own login, written by the migrate service (issue 29, item 5):
    # none of them connects as the superuser that migrated.
    logins = stack.rows(
        "SELECT DISTINCT a.application_name, a.usename::text FROM pg_stat_activity a"
        " WHERE a.datname = 'codity' AND a.application_name IN"
        " ('codity-listener', 'codity-scheduler', 'codity-web', 'codity-worker')"
        " ORDER BY 1, 2"
    )
    assert {app: user for app, user in logins} == {
        "codity-listener": "codity_worker_login",
        "codity-scheduler": "codity_scheduler_login",
        "codity-web": "codity_web_login",
        "codity-worker": "codity_worker_login",
    }, logins


def test_a_killed_worker_container_s_job_is_reaped_refunded_and_completed_once(
    stack: Stack,
) -> None:
    stack.up(workers=2)
    [job] = stack.enqueue([{"to": "kill@example.com", "duration_s": 8}])
    victim = wait_until(
        lambda: stack.value(
            "SELECT w.host FROM codity.jobs j JOIN codity.workers w ON w.id = j.worker_id "
            "WHERE j.id = %s AND j.status = 'running'",
            [job],
        ),
        timeout=60,
        what="a worker starts the job",
        interval=0.2,
    )
    killed_at = stack.value("SELECT clock_timestamp()")
    _run(["docker", "kill", victim], timeout=60)
    wait_until(
        lambda: _all_finished(stack, [job]), timeout=120, what="the job completes", interval=0.5
    )

    [survivor] = {stack.hostname(c) for c in stack.containers("worker")} - {victim}
    assert [e[1:] for e in _executions(stack, [job])] == [
        (1, 1, victim, "reaped", True),  # the attempt the kill cut short is refunded
        (2, 1, survivor, "completed", False),
    ]
    assert stack.rows(
        "SELECT status::text, attempt, crash_count FROM codity.jobs WHERE id = %s", [job]
    ) == [("completed", 1, 1)]
    assert stack.rows("SELECT status::text FROM codity.workers WHERE host = %s", [victim]) == [
        ("dead",)
    ]
    requeued_after = stack.value(
        "SELECT finished_at - %s FROM codity.job_executions WHERE job_id = %s "
        "AND execution_seq = 1",
        [killed_at, job],
    )
    print(f"\n[compose kill] requeued {requeued_after.total_seconds():.1f}s after docker kill")


def test_compose_stop_drains_the_workers_exits_0_and_charges_no_attempt(stack: Stack) -> None:
    stack.up(workers=2)
    # The long jobs first: claims take jobs in order, so each worker's first claim starts
    # long ones (a claimed job is "running" at once; the rest wait in the worker's hand).
    long = stack.enqueue([{"to": f"long{i}@example.com", "duration_s": 300} for i in range(10)])
    short = stack.enqueue([{"to": f"short{i}@example.com", "duration_s": 1} for i in range(10)])
    wait_until(
        lambda: stack.value(
            "SELECT count(*) = 20 FROM codity.jobs WHERE id = ANY(%s) AND status = 'running'",
            [long + short],
        ),
        timeout=60,
        what="every job is claimed",
        interval=0.2,
    )
    time.sleep(1)  # the claimed long jobs' handlers are running
    containers = stack.compose("ps", "-a", "-q").split()
    stack.compose("stop", timeout=180)

    exits = {
        stack.inspect(c, "{{.Name}}"): stack.inspect(c, "{{.State.ExitCode}}") for c in containers
    }
    assert set(exits.values()) == {"0"}, exits
    stack.compose("start", "postgres")
    wait_until(stack._db_answers, timeout=60, what="postgres is back", interval=0.5)

    executions = _executions(stack, short + long)
    outcomes = Counter((e[4], e[5]) for e in executions)
    # Finished within the grace or given back refunded: nothing failed, reaped or charged.
    assert set(outcomes) <= {("completed", False), ("released", True)}, outcomes
    # Long jobs ran into the drain and outlived its 3 s; the rest waited and went back at once.
    worker_logs = stack.compose("logs", "--no-color", "worker")
    assert "did not finish in time: releasing them (attempt not charged)" in worker_logs
    assert outcomes[("released", True)] >= 10
    assert (
        stack.rows(
            "SELECT id FROM codity.jobs WHERE id = ANY(%s) AND status IN ('claimed', 'running')",
            [short + long],
        )
        == []
    )
    # A job's attempt counts only what completed: releases were refunded.
    assert (
        stack.rows(
            "SELECT j.id FROM codity.jobs j WHERE j.id = ANY(%s) AND j.attempt <> "
            "(SELECT count(*) FROM codity.job_executions e WHERE e.job_id = j.id "
            " AND e.status = 'completed')",
            [short + long],
        )
        == []
    )
    assert stack.rows("SELECT DISTINCT status::text FROM codity.workers") == [("stopped",)]
    print(f"\n[compose stop] executions: {dict(outcomes)}")
