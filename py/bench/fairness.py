"""``codity bench --fairness``: one busy queue beside a trickle, as issue 26 found it.

Two ``codity worker`` processes at their defaults but for the queues (``--queue bulk --queue
trickle``, then the other way round): ``bulk`` gets a backlog in one go, ``trickle`` one job
every ``1/rate`` seconds while bulk drains. Reported for each order: bulk's drain rate alone
and beside the trickle (from its executions: first claim to last finish), and the trickle's
pickup (the handler's first line minus the enqueue's return, one clock) p50, p99 and max.
The target (issue 26): trickle p99 within 1 s, and bulk within 5 % of its rate alone.

Then the same between tenants: ``bulk`` in project ``noisy``, ``trickle`` in project
``quiet``, the workers serving both (``--queue noisy/bulk --queue quiet/trickle``, each
registered once in each project), in either order.
"""

from __future__ import annotations

import logging
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from codity.bench._report import write_section
from codity.bench._throughput import reset_jobs
from codity.bench._workers import WorkerProcesses
from codity.bench.tasks import PICKUP_TASK
from codity.explain import scratch_database

__all__ = ["FairnessRun", "run_fairness", "run_fairness_command"]

log = logging.getLogger(__name__)

_BATCH = 10_000
WORK_MS = 10
"""How long each bulk job's handler takes: two workers of 10 slots drain about 2,000 a
second, so the trickle runs beside a backlog for tens of seconds, and bulk's rate depends
on the slots it gets (with no-op jobs it depends on the database, and a slot lent to the
trickle costs bulk nothing)."""
BEGIN = "<!-- fairness:begin -->"
END = "<!-- fairness:end -->"
HEADING = "## Fair share between queues (`codity bench --fairness`)"


@dataclass(frozen=True)
class _Scenario:
    order: tuple[str, str]  # the workers' --queue arguments
    bulk_id: int
    trickle_id: int
    trickle_project: int | None  # None: the default project


@dataclass(frozen=True)
class FairnessRun:
    order: tuple[str, str]
    alone_jobs_s: float
    beside_jobs_s: float
    trickle: list[float]  # pickups, seconds

    @property
    def ratio(self) -> float:
        return self.beside_jobs_s / self.alone_jobs_s

    def pickup(self, q: float) -> float:
        ordered = sorted(self.trickle)
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _bulk_rate(conn: psycopg.Connection[Any], queue_id: int) -> float:
    row = conn.execute(
        "SELECT count(*), extract(epoch FROM max(e.finished_at) - min(e.claimed_at))"
        " FROM codity.job_executions e WHERE e.queue_id = %s AND e.status = 'completed'",
        [queue_id],
    ).fetchone()
    assert row is not None
    return float(row[0]) / max(float(row[1]), 1e-9)


def _completed(conn: psycopg.Connection[Any], queue_id: int) -> int:
    row = conn.execute(
        "SELECT count(*) FROM codity.jobs j WHERE j.queue_id = %s AND j.status = 'completed'",
        [queue_id],
    ).fetchone()
    assert row is not None
    return int(row[0])


def _drain(
    conn: psycopg.Connection[Any], url: str, scenario: _Scenario, bulk: int, rate: float,
    work: Path, label: str,
) -> tuple[float, list[float]]:  # fmt: skip
    """Bulk's backlog drained by two workers on ``order``, with a trickle when ``rate``."""
    reset_jobs(conn)
    for start in range(0, bulk, _BATCH):
        conn.execute(
            "SELECT count(*) FROM codity.enqueue_many_in_queue(%s, %s)",
            [
                scenario.bulk_id,
                Jsonb(
                    [{"task": PICKUP_TASK, "payload": {"work_ms": WORK_MS}}]
                    * min(_BATCH, bulk - start)
                ),
            ],
        )
    enqueued: dict[int, float] = {}
    with WorkerProcesses(
        url, app="codity.bench.tasks:registry", queue=scenario.order, concurrency=10, count=2,
        listen=True, log_dir=work, label=label,
    ) as workers:  # fmt: skip
        workers.wait_ready(conn)
        while _completed(conn, scenario.bulk_id) < bulk:
            workers.check_alive()
            if rate > 0:
                row = conn.execute(
                    "SELECT job_id FROM codity.enqueue('trickle', %s, p_project_id => %s)",
                    [PICKUP_TASK, scenario.trickle_project],
                ).fetchone()
                assert row is not None
                enqueued[int(row[0])] = time.time()
                time.sleep(1 / rate)
            else:
                time.sleep(0.05)
        while _completed(conn, scenario.trickle_id) < len(enqueued):
            workers.check_alive()
            time.sleep(0.05)
    began = conn.execute(
        "SELECT e.job_id, (e.result ->> 'started')::float8 FROM codity.job_executions e"
        " WHERE e.job_id = ANY(%s) AND e.status = 'completed'",
        [list(enqueued)],
    ).fetchall()
    return _bulk_rate(conn, scenario.bulk_id), [started - enqueued[job] for job, started in began]


def _scenarios(conn: psycopg.Connection[Any]) -> list[_Scenario]:
    """Both queues in the default project, then each in a project of its own (tenants);
    each pair in both orders."""

    def queue(name: str, project: int | None) -> int:
        row = conn.execute(
            "SELECT queue_id FROM codity.create_queue(%s, p_project_id => %s)", [name, project]
        ).fetchone()
        assert row is not None
        return int(row[0])

    def project(slug: str) -> int:
        row = conn.execute(
            "INSERT INTO codity.projects (org_id, slug, name)"
            " SELECT org_id, %s, %s FROM codity.projects WHERE is_default RETURNING id",
            [slug, slug],
        ).fetchone()
        assert row is not None
        return int(row[0])

    bulk, trickle = queue("bulk", None), queue("trickle", None)
    quiet = project("quiet")
    tenant_bulk, tenant_trickle = queue("bulk", project("noisy")), queue("trickle", quiet)
    return [
        _Scenario(("bulk", "trickle"), bulk, trickle, None),
        _Scenario(("trickle", "bulk"), bulk, trickle, None),
        _Scenario(("noisy/bulk", "quiet/trickle"), tenant_bulk, tenant_trickle, quiet),
        _Scenario(("quiet/trickle", "noisy/bulk"), tenant_bulk, tenant_trickle, quiet),
    ]


def run_fairness(url: str, *, bulk: int, rate: float) -> tuple[list[FairnessRun], str]:
    """Both orders, each alone then beside the trickle; and the server's version."""
    runs = []
    with (
        tempfile.TemporaryDirectory(prefix="codity-fairness-") as tmp,
        scratch_database(url, "codity_fairness") as scratch,
        psycopg.connect(scratch, autocommit=True) as conn,
    ):
        for scenario in _scenarios(conn):
            log.info("order %s: bulk alone, then beside a trickle", scenario.order)
            alone, _ = _drain(conn, scratch, scenario, bulk, 0.0, Path(tmp), "alone")
            beside, pickups = _drain(conn, scratch, scenario, bulk, rate, Path(tmp), "beside")
            runs.append(FairnessRun(scenario.order, alone, beside, pickups))
        row = conn.execute("SHOW server_version").fetchone()
        assert row is not None
        server = f"PostgreSQL {row[0]}"
    return runs, server


def render(runs: list[FairnessRun], bulk: int, rate: float, server: str) -> str:
    lines = [
        f"{bulk:,} jobs of {WORK_MS} ms in `bulk`, {rate:g} a second into `trickle` while it"
        " drains; two"
        " `codity worker` processes at the defaults (concurrency 10, prefetch 30), the"
        " queues in the order shown (`noisy/bulk`: queue `bulk` of project `noisy`; the"
        f" workers register once in each project); {server},"
        f" {len(os.sched_getaffinity(0))} cores.",
        "",
        "| queues | bulk alone, jobs/s | bulk beside the trickle | ratio"
        " | trickle pickup p50 | p99 | max | trickle jobs |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in runs:
        lines.append(
            f"| `--queue {r.order[0]} --queue {r.order[1]}` | {r.alone_jobs_s:,.0f}"
            f" | {r.beside_jobs_s:,.0f} | {r.ratio:.2f} | {statistics.median(r.trickle):.3f} s"
            f" | {r.pickup(0.99):.3f} s | {max(r.trickle):.3f} s | {len(r.trickle)} |"
        )
    return "\n".join(lines)


def run_fairness_command(url: str, *, bulk: int, rate: float, write: bool) -> int:
    runs, server = run_fairness(url, bulk=bulk, rate=rate)
    table = render(runs, bulk, rate, server)
    print(table)
    if write:
        path = write_section(f"{BEGIN}\n{table}\n{END}", BEGIN, END, HEADING)
        print(f"wrote {path}")
    return 0
