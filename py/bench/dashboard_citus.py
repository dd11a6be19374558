"""``codity bench-dashboard --citus``: the dashboard's pages on a Citus cluster against plain
PostgreSQL, the same world on each, in one run on one machine.

The servers are codity.bench.citus_servers' (a plain PostgreSQL 18 and a coordinator with
two workers, same binaries and settings, each database migrated, the cluster's distributed
by ``codity migrate --citus``). The world of codity.bench.dashboard_world (a million jobs by
default, their executions and dead letters) is loaded into each, spread over the ten queues
and so over both worker nodes, and every page is timed as ``codity bench-dashboard`` times
it (codity.bench.dashboard_run.measure_database), plain first. Issue 24's target: each
page's p95 on the cluster within twice plain's. The figures are printed and written between
this command's markers in docs/PERFORMANCE.md (``--no-write``: printed only).
"""

from __future__ import annotations

from datetime import UTC, datetime

import psycopg

from codity.bench._machine import describe_machine, load_average
from codity.bench._model import Machine
from codity.bench._report import write_section
from codity.bench.citus_servers import BenchServers, interrupt_on_sigterm
from codity.bench.dashboard_run import Measured, measure_database

__all__ = ["TARGET_RATIO", "run_dashboard_citus_command"]

BEGIN = "<!-- BEGIN codity bench-dashboard citus -->"
END = "<!-- END codity bench-dashboard citus -->"
TARGET_RATIO = 2.0


def _render(machine: Machine, plain: Measured, cluster: Measured, when: str) -> str:
    rows = []
    ratios = []
    for p, c in zip(plain.pages, cluster.pages, strict=True):
        ratio = c.p95_ms / p.p95_ms if p.p95_ms else float("inf")
        ratios.append((ratio, p.path))
        rows.append(
            f"| `{p.path}` | {p.p50_ms:.1f} | {p.p95_ms:.1f} | {c.p50_ms:.1f} | {c.p95_ms:.1f}"
            f" | {ratio:.2f} |"
        )
    worst, worst_path = max(ratios)
    over = [path for ratio, path in ratios if ratio > TARGET_RATIO]
    verdict = (
        f"every page within {TARGET_RATIO:.0f}x"
        if not over
        else f"{len(over)} page(s) over {TARGET_RATIO:.0f}x: " + ", ".join(f"`{p}`" for p in over)
    )
    return "\n".join([
        BEGIN,
        "",
        f"Measured {when} by `./codity bench-dashboard --citus` on {machine.cpus} CPUs "
        f"({machine.cpu_model}), {machine.memory_gib:.1f} GiB, "
        f"{machine.postgres.split(',')[0]}; load average {machine.load_before[0]:.2f} before, "
        f"{machine.load_after[0]:.2f} after. Plain PostgreSQL 18 against Citus 14 (a "
        "coordinator and two workers) on the same machine, durable commits on both.",
        "",
        f"World on each: {plain.world.jobs:,} jobs, {plain.world.executions:,} executions, "
        f"{plain.world.dead_letters:,} dead letters; loaded in {plain.world.seconds:.0f} s "
        f"(plain) and {cluster.world.seconds:.0f} s (cluster).",
        "",
        "| page | plain p50 ms | plain p95 ms | Citus p50 ms | Citus p95 ms | p95 Citus / plain |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
        *rows,
        "",
        f"Worst p95 ratio {worst:.2f} (`{worst_path}`): {verdict}. Server time from "
        f"Server-Timing, {plain.pages[0].samples} samples per page after warm-up.",
        "",
        f"Live pages ({plain.live.pages} event streams on one web process): NOTIFY -> event "
        f"p99 {plain.live.p99_ms:.0f} ms plain, {cluster.live.p99_ms:.0f} ms Citus "
        f"({plain.live.missed} and {cluster.live.missed} missed).",
        "",
        END,
    ])  # fmt: skip


def run_dashboard_citus_command(*, jobs: int, pages: int, write: bool) -> int:
    load_before = load_average()
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    with interrupt_on_sigterm(), BenchServers() as servers:
        plain_url = servers.plain[0].url()
        cluster_url = servers.cluster[0].url()
        print("plain PostgreSQL:", flush=True)
        plain = measure_database(plain_url, jobs=jobs, pages=pages)
        print("Citus cluster:", flush=True)
        cluster = measure_database(cluster_url, jobs=jobs, pages=pages)
        with psycopg.connect(plain_url) as conn:
            machine = describe_machine(conn, load_before)
    block = _render(machine, plain, cluster, when)
    print(block)
    if write:
        print(f"wrote {write_section(block, BEGIN, END, '### The dashboard on Citus')}")
    return 0
