"""``codity bench-dashboard``: every dashboard page's server time at a million jobs, and 200
live pages on one web process.

In a scratch database on the target server (dropped at the end): the world of
:mod:`codity.bench.dashboard_world`, then a real ``codity web`` process on a free port,
signed in as the world's owner through the API's login (the session cookie is its refresh
token, as the sign-in page sets it). Every GET page of the dashboard is timed
(:mod:`codity.bench.dashboard_pages`), detail pages on ids of the world, and the jobs list
with each state tab and a payload filter; then 200 event streams are opened and NOTIFY'd
(:mod:`codity.bench.live_events`). The figures are printed and written between the
``codity bench-dashboard`` markers of docs/PERFORMANCE.md (``--no-write``: printed only).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import secrets
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

import psycopg

from codity.bench._machine import describe_machine, load_average
from codity.bench._model import Machine
from codity.bench._report import write_section
from codity.bench.dashboard_pages import PageFigure, time_pages
from codity.bench.dashboard_world import OPERATOR_EMAIL, OPERATOR_PASSWORD, World, build_world
from codity.bench.live_events import LiveFigures, measure_live_pages
from codity.explain import scratch_database
from codity.supervisor import codity_command
from codity.web.dashboard.routes import DASHBOARD_PAGES
from codity.web.dashboard.session import SESSION_COOKIE

__all__ = ["Measured", "measure_database", "run_dashboard_command"]

BEGIN = "<!-- BEGIN codity bench-dashboard -->"
END = "<!-- END codity bench-dashboard -->"
_PARAM = re.compile(r"\{(\w+)(?::\w+)?\}")
_SKIPPED = {"/signin", "/events", "/jobs/bulk/confirm"}  # the last: timed with a scope below
TARGET_P95_MS = 100.0
TARGET_LIVE_P99_MS = 1000.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _page_paths(world: World) -> list[str]:
    """Every GET page, path parameters filled from the world, plus list variants."""
    values = {
        "job_id": str(world.sample_job),
        "dead_letter_id": str(world.sample_dead_letter),
        "worker_id": str(world.sample_dead_worker),
        "name": "emails",
        "schedule": world.sample_schedule,
        "workflow_id": str(world.sample_workflow),
    }
    paths = []
    for page in DASHBOARD_PAGES:
        if page.method != "GET" or page.path in _SKIPPED:
            continue
        params = _PARAM.findall(page.path)
        if "schedules/" in page.path:
            filled = _PARAM.sub(world.sample_schedule, page.path)
        else:
            missing = [p for p in params if p not in values]
            if missing:
                raise RuntimeError(f"bench-dashboard: no value for {missing} in {page.path}")
            filled = _PARAM.sub(lambda m: values[m.group(1)], page.path)
        paths.append(filled)
    return paths + LIST_VARIANTS


LIST_VARIANTS: list[str] = [
    "/jobs?state=completed",
    "/jobs?state=dead_letter&queue=emails",
    "/jobs?state=queued",
    "/jobs?q=payload.customer:42",
    "/jobs?q=task:task.3%20state:completed",
    "/fragments/jobs?state=running",
    "/dead-letters?queue=emails",
    "/jobs/bulk/confirm?action=retry&state=dead_letter&queue=emails",
]
"""List pages worth timing on their own: state tabs, the search box's filters (payload
containment through the GIN index), and the bulk confirmation, which counts its scope
exactly."""


def _request(base: str, method: str, path: str, body: dict[str, str] | None = None) -> bytes:
    parts = urlsplit(base)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)
    try:
        payload = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"} if payload else {}
        conn.request(method, path, body=payload, headers=headers)
        response = conn.getresponse()
        data = response.read()
        if response.status != 200:
            raise RuntimeError(f"{method} {path}: {response.status} {data[:200]!r}")
        return data
    finally:
        conn.close()


def _wait_ready(base: str, web: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if web.poll() is not None:
            raise RuntimeError(f"codity web exited:\n{log.read_text()[-2000:]}")
        try:
            _request(base, "GET", "/readyz")
            return
        except (OSError, RuntimeError):
            time.sleep(0.2)
    raise RuntimeError(f"codity web did not become ready:\n{log.read_text()[-2000:]}")


def _sign_in(base: str) -> str:
    answer = json.loads(
        _request(
            base,
            "POST",
            "/api/v1/auth/login",
            {"email": OPERATOR_EMAIL, "password": OPERATOR_PASSWORD},
        )
    )
    return f"{SESSION_COOKIE}={answer['data']['refresh_token']}"


def _render(
    machine: Machine, world: World, pages: list[PageFigure], live: LiveFigures, when: str
) -> str:
    worst = max(p.p95_ms for p in pages)
    lines = [
        BEGIN,
        "",
        f"Measured {when} by `./codity bench-dashboard` on {machine.cpus} CPUs "
        f"({machine.cpu_model}), {machine.memory_gib:.1f} GiB, {machine.postgres.split(',')[0]}; "
        f"load average {machine.load_before[0]:.2f} before, {machine.load_after[0]:.2f} after.",
        "",
        f"World: {world.jobs:,} jobs, {world.executions:,} executions "
        f"({world.failed_executions:,} failed), {world.dead_letters:,} dead letters, "
        f"loaded in {world.seconds:.0f} s.",
        "",
        "| page | p50 ms | p95 ms | max ms | KiB |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for p in pages:
        lines.append(
            f"| `{p.path}` | {p.p50_ms:.1f} | {p.p95_ms:.1f} | {p.max_ms:.1f} "
            f"| {p.bytes / 1024:.1f} |"
        )
    verdict = "meets" if worst <= TARGET_P95_MS else "MISSES"
    lines += [
        "",
        f"Slowest page p95: {worst:.1f} ms ({verdict} the target of {TARGET_P95_MS:.0f} ms; "
        f"{pages[0].samples} samples per page after warm-up, server time from Server-Timing).",
        "",
        f"Live pages: {live.pages} event streams on one web process, held with "
        f"{live.listeners} listener connection(s); {live.rounds} NOTIFYs, "
        f"{live.delivered:,} deliveries ({live.missed} missed); NOTIFY → event p50 "
        f"{live.p50_ms:.0f} ms, p99 {live.p99_ms:.0f} ms, max {live.max_ms:.0f} ms "
        f"(debounce 250 ms included; target p99 < {TARGET_LIVE_P99_MS:.0f} ms: "
        f"{'met' if live.p99_ms < TARGET_LIVE_P99_MS else 'MISSED'}).",
        "",
        END,
    ]
    return "\n".join(lines)


@dataclass(frozen=True)
class Measured:
    """What one database gave: its world, every page's figures, the live pages'."""

    world: World
    pages: list[PageFigure]
    live: LiveFigures


def measure_database(url: str, *, jobs: int, pages: int) -> Measured:
    """Load the world into the migrated database at ``url`` (empty), start ``codity web``
    on it, sign in and time every page, then the live pages' event streams."""
    print(f"loading {jobs:,} jobs ...", flush=True)
    world = build_world(url, jobs)
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT id FROM codity.queues WHERE name = 'emails'").fetchone()
        assert row is not None
        queue_id = int(row[0])
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    env = dict(os.environ, DATABASE_URL=url, JWT_SECRET=secrets.token_hex(32))
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "web.log"
        with log.open("wb") as out:
            web = subprocess.Popen(
                [*codity_command(), "web", "--host", "127.0.0.1", "--port", str(port)],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        try:
            _wait_ready(base, web, log)
            cookie = _sign_in(base)
            print("timing pages ...", flush=True)
            figures = time_pages(base, cookie, _page_paths(world))
            print(f"opening {pages} live pages ...", flush=True)
            streams = measure_live_pages(base, cookie, url, queue_id, pages=pages)
        finally:
            web.terminate()
            web.wait(timeout=30)
    return Measured(world, figures, streams)


def run_dashboard_command(url: str, *, jobs: int, pages: int, write: bool) -> int:
    load_before = load_average()
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    with scratch_database(url, "codity_dash") as scratch:
        measured = measure_database(scratch, jobs=jobs, pages=pages)
        with psycopg.connect(scratch) as conn:
            machine = describe_machine(conn, load_before)
    block = _render(machine, measured.world, measured.pages, measured.live, when)
    print(block)
    if write:
        print(f"wrote {write_section(block, BEGIN, END, '## Dashboard')}")
    return 0
