"""``codity bench --citus`` runs end to end, reports every figure, and leaves no server behind.

Performance is measured by the bench, never asserted in tests. These tests prove that:

- a tiny run (``--quick``: 400 jobs over 8 queues, one round, both sides) completes and
  prints every figure the issue asks for: the drain of each side and their ratio, CPU per
  job on each server, the multi-shard count, statements per job on the coordinator, pickup
  p50/p99 of each side, the scaling model and the settings; leaves docs/PERFORMANCE.md alone
  under ``--no-write``; and deletes the folder of the four servers it started;
- a run interrupted by Ctrl-C (SIGINT) while its servers run stops and deletes them all;
- the proof of "zero multi-shard statements" can fail: a statement over every shard, run
  with the setting the bench's cluster runs with, is found in the node's log with its
  statement and the function it came from; a statement on one shard is not (break it first);
- writing the section keeps the rest of the page and replaces only its own block.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import psycopg
import pytest

from codity.bench._model import Pickup
from codity.bench._report import performance_path
from codity.bench.citus_model import (
    CITUS,
    PLAIN,
    CitusOptions,
    CitusReport,
    DrainRound,
    MultiTask,
    NodeSpent,
    Placement,
    ServerInfo,
    StatementCount,
)
from codity.bench.citus_report import BEGIN, END, HEADING, write_citus
from codity.bench.citus_stats import multi_tasks
from tests.citus import CitusCluster
from tests.processes import CODITY

pytestmark = pytest.mark.citus

_HOME = re.compile(r"starting a Citus cluster .* in (\S+?)\"")


def _hear_ctrl_c() -> None:
    # A suite started in the background by a shell without job control inherits SIGINT
    # ignored, and Python then keeps it ignored: the Ctrl-C test would prove nothing.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _bench(*args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    return subprocess.Popen(
        [*CODITY, "bench", "--citus", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=_hear_ctrl_c,
    )


def _rows(output: str) -> dict[str, list[str]]:
    """Markdown table rows: first cell -> the other cells."""
    rows = {}
    for line in output.splitlines():
        if line.startswith("| ") and not line.startswith("| ---"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows[cells[0]] = cells[1:]
    return rows


def _section(output: str, heading: str) -> str:
    """The text under the ``### heading...`` line, to the next heading."""
    found = re.search(rf"^### {re.escape(heading)}[^\n]*\n(.*?)(?=^### |\Z)", output, re.M | re.S)
    assert found, heading
    return found[1]


def _number(text: str) -> float:
    found = re.search(r"-?[\d,]+(?:\.\d+)?", text)
    assert found, f"no number in {text!r}"
    return float(found[0].replace(",", ""))


def test_quick_citus_bench_reports_every_figure() -> None:
    page = performance_path().read_text("utf-8")
    proc = _bench("--quick", "--no-write")
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, f"{out}\n{err[-4000:]}"
    headings = ("Drain and pickup", "Targets", "Per server", "Multi-shard statements",
                "The whole hot path",
        "The most frequent statements", "Scaling model", "Machine, settings")  # fmt: skip
    for heading in headings:
        assert f"### {heading}" in out, heading
    rows = _rows(_section(out, "Drain and pickup"))
    drain = next(v for k, v in rows.items() if k.startswith("Drain of 400 jobs over 8 queues"))
    plain, citus, ratio = (_number(x) for x in drain)
    assert plain > 0 and citus > 0
    assert ratio == pytest.approx(citus / plain, rel=0.02)
    for row in ("PostgreSQL CPU per job, every server of the side", "Worker processes' CPU per job",
                "WAL per job, every server of the side",
                "Statements per job the workers sent (plain server / coordinator)"):  # fmt: skip
        assert _number(rows[row][0]) > 0 and _number(rows[row][1]) > 0, row
    pickup = next(v for k, v in rows.items() if k.startswith("Pickup p50 / p99"))
    for side in pickup[:2]:
        p50, p99 = (float(x) for x in re.findall(r"[\d.]+", side)[:2])
        assert 0 < p50 <= p99, side
    servers = _rows(_section(out, "Per server"))
    for server in ("plain", "coordinator", "worker1", "worker2"):
        cpu = servers[server][1]
        assert cpu.endswith("µs") and _number(cpu) >= 0, server
    assert re.search(r"\*\*\d+ multi-shard statement\(s\)\*\* in 1 Citus drain", out)
    verdicts = [
        k for k, v in _rows(_section(out, "Targets")).items() if v[-1] in {"pass", "**miss**"}
    ]
    assert len(verdicts) == 3, verdicts
    assert "a coordinator core carries about" in out
    assert "`fsync` on, `synchronous_commit` on" in out
    assert "the same on each node of the cluster" in out
    assert performance_path().read_text("utf-8") == page, "--no-write wrote the page"
    home = _HOME.search(err)
    assert home, err[-2000:]
    assert not Path(home[1]).exists(), "the servers' folder is still there"


def test_ctrl_c_stops_and_deletes_every_server() -> None:
    proc = _bench("--quick", "--no-write")
    assert proc.stderr is not None
    seen = ""
    deadline = time.monotonic() + 120
    while "round 1 of 1: plain, drain" not in seen:
        line = proc.stderr.readline()
        assert line and time.monotonic() < deadline, f"no drain began:\n{seen[-3000:]}"
        seen += line
    home = _HOME.search(seen)
    assert home, seen[-2000:]
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    assert not Path(home[1]).exists()
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True)
    assert home[1] not in ps.stdout, "a server of the interrupted run still runs"


def test_a_multi_shard_statement_is_found_in_the_log(
    citus_cluster: CitusCluster, citus_db_url: str
) -> None:
    logfile = citus_cluster.coordinator.logfile
    offset = logfile.stat().st_size
    with psycopg.connect(citus_db_url, autocommit=True) as conn:
        conn.execute("SET citus.multi_task_query_log_level = 'log'")
        conn.execute("SELECT count(*) FROM codity.jobs WHERE queue_id = 1").fetchall()
        conn.execute(
            "CREATE FUNCTION pg_temp.every_shard() RETURNS bigint LANGUAGE plpgsql AS"
            " $$ BEGIN RETURN (SELECT count(*) FROM codity.jobs WHERE status = 'queued'); END $$"
        )
        conn.execute("SELECT pg_temp.every_shard()").fetchall()
    for _ in range(50):  # the server writes its log asynchronously to us
        found = multi_tasks("coordinator", logfile, offset)
        if found:
            break
        time.sleep(0.1)
    assert found == (
        MultiTask(
            "coordinator",
            "SELECT pg_temp.every_shard()",
            found[0].context if found else "",
        ),
    )
    assert "every_shard" in found[0].context


def _report() -> CitusReport:
    def spent(node: str, calls: int) -> NodeSpent:
        return NodeSpent(node, 1.0, 1000, (StatementCount("SELECT 1", calls, True),))

    def drain(side: str, seconds: float) -> DrainRound:
        nodes = ("plain",) if side == PLAIN else ("coordinator", "worker1", "worker2")
        return DrainRound(side, 1, 800, seconds, tuple(spent(n, 10) for n in nodes), 0.5, 8)

    pickup = Pickup(True, True, (1.0, 2.0), (0.5, 1.0), (1.0, 1.0))
    settings = (("fsync", "on"), ("synchronous_commit", "on"))
    return CitusReport(
        options=CitusOptions(jobs=800, rounds=1), drains=(drain(PLAIN, 1.0), drain(CITUS, 2.0)),
        pickups={PLAIN: pickup, CITUS: pickup}, first_pickups={PLAIN: (5.0,), CITUS: (9.0,)},
        coverage=None,
        placements=tuple(Placement(f"drain-{i}", i, f"worker{1 + i % 2}") for i in range(1, 9)),
        servers=tuple(ServerInfo(n, "PostgreSQL 18", settings)
                      for n in ("plain", "coordinator", "worker1", "worker2")),
        citus_version="14.0.1", cpus=2, cpu_model="cpu", memory_gib=1.0,
        load_before=(0.0, 0.0, 0.0), load_after=(0.0, 0.0, 0.0), python="CPython",
        commit="abc", command="./codity bench --citus", started_at="now", seconds=1.0,
    )  # fmt: skip


def test_writing_replaces_only_its_block(tmp_path: Path) -> None:
    page = tmp_path / "PERFORMANCE.md"
    page.write_text("# Performance\n\nhand-written\n", "utf-8")
    write_citus(_report(), page)
    first = page.read_text("utf-8")
    assert first.startswith("# Performance\n\nhand-written\n")
    assert first.count(HEADING) == 1 and first.count(BEGIN) == 1 and first.count(END) == 1
    assert "| **0.50** (median of the rounds' ratios) |" in first
    page.write_text(first.replace(END, END + "\n\nanalysis kept\n"), "utf-8")
    write_citus(_report(), page)
    second = page.read_text("utf-8")
    assert second.count(BEGIN) == 1 and "analysis kept" in second and "hand-written" in second
