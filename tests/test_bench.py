"""``codity bench`` runs end to end and reports every figure; no figure is asserted fast.

Performance is measured by the benchmark, never by timed tests: these tests check that a
quick run against the test server completes, reports each measurement with sane numbers
(positive; percentiles in order; every drained job completed exactly once), leaves
docs/PERFORMANCE.md alone under --no-write and drops its scratch database; and that
writing the document keeps the hand-written text around the generated block.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import psycopg
import pytest

from codity.bench._model import (
    BenchOptions,
    ClaimCost,
    Drain,
    Enqueue,
    Machine,
    Pickup,
    Report,
    percentile,
)
from codity.bench._report import BEGIN, END, performance_path, write_performance
from codity.supervisor import codity_command

CODITY = codity_command()
QUICK_JOBS = BenchOptions.quick_defaults().jobs


def _rows(output: str) -> dict[str, tuple[str, str]]:
    """Markdown table rows of the output: first cell -> (second cell, third cell)."""
    rows = {}
    for line in output.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 3 and not set(cells[1]) <= {"-", ":", " "}:
            rows[cells[0]] = (cells[1], cells[2])
    return rows


def _number(text: str) -> float:
    found = re.search(r"-?[\d,]+(?:\.\d+)?", text)
    assert found, f"no number in {text!r}"
    return float(found[0].replace(",", ""))


def _latencies(text: str) -> tuple[float, float, float]:
    found = re.fullmatch(r"p50 ([\d.-]+) ms · p95 ([\d.-]+) ms · p99 ([\d.-]+) ms", text)
    assert found, text
    return float(found[1]), float(found[2]), float(found[3])


@pytest.mark.slow  # a whole quick bench, about 8 s: CI runs it (.ci/run)
def test_quick_bench_reports_every_figure(pg_server_url: str) -> None:
    doc = performance_path()
    before = doc.read_bytes() if doc.exists() else None
    env = os.environ | {
        "DATABASE_URL": pg_server_url,
        "WORKER_POLL_INTERVAL_MS": "200",
        # Heartbeats every 0.2 s interleave with claims and completions during the drain.
        "WORKER_HEARTBEAT_MS": "200",
    }
    run = subprocess.run(
        [*CODITY, "bench", "--quick", "--no-write"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    rows = _rows(run.stdout)

    throughputs = ("Enqueue, one by one", "Enqueue, batched", "Drain, workers",
                   "Drain, raw-SQL ceiling")  # fmt: skip
    for label in throughputs:
        result, _ = rows[label]
        assert result.endswith("jobs/s") and _number(result) > 0, (label, result)
    for label in ("Drain, workers", "Drain, raw-SQL ceiling"):
        done = re.search(r"([\d,]+) completed, ([\d,]+) executions", rows[label][1])
        assert done, rows[label]
        assert _number(done[1]) == _number(done[2]) == QUICK_JOBS, rows[label]
    assert _number(rows["Drain, workers / ceiling"][0]) > 0

    pickups = ("Pickup with NOTIFY", "Pickup, polling only",
               "Pickup with NOTIFY, claim not flushed (diagnostic)")  # fmt: skip
    for label in pickups:
        p50, p95, p99 = _latencies(rows[label][0])
        assert 0 < p50 <= p95 <= p99, (label, p50, p95, p99)
    assert "WORKER_POLL_INTERVAL_MS=200" in rows["Pickup, polling only"][1]

    for label in ("Claim, 1,000 queued", "Claim, 20,000 queued", "Claim, 20,000 / 1,000"):
        assert _number(rows[label][0]) > 0, (label, rows[label])

    targets = ("Worker drain", "Pickup p50", "Pickup p99", "Claim at")
    verdicts = [how for label, (_, how) in rows.items() if label.startswith(targets)]
    assert len(verdicts) == 4, rows
    assert all(v == "pass" or v.startswith("**miss**") for v in verdicts), verdicts

    assert (doc.read_bytes() if doc.exists() else None) == before, "--no-write wrote the doc"
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        left = conn.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE 'codity_bench%'"
        ).fetchall()
    assert left == [], "the scratch database was not dropped"


def test_percentile_interpolates_between_ranks() -> None:
    samples = tuple(float(x) for x in range(1, 101))
    assert percentile(samples, 50) == pytest.approx(50.5)
    assert percentile(samples, 99) == pytest.approx(99.01)
    assert percentile((3.0,), 95) == 3.0


def _report() -> Report:
    drain = Drain(jobs=10, seconds=1.0, completed=10, executions=10, claims=1, completions=1)
    pickup = Pickup(True, True, (1.0, 2.0, 3.0), (0.5, 0.5, 0.5), (1.0, 1.0, 1.0))
    machine = Machine(2, "cpu", 1.0, (0.0, 0.0, 0.0), (0.0, 0.0, 0.0), "py", "pg", ())
    return Report(
        options=BenchOptions.quick_defaults(),
        machine=machine,
        enqueue_single=Enqueue(10, 1, 1.0),
        enqueue_batched=Enqueue(10, 10, 0.1),
        pickup_notify=pickup,
        pickup_poll=pickup,
        pickup_unflushed=pickup,
        drains=(drain,),
        ceilings=(drain,),
        ceiling_clients=2,
        claim_small=ClaimCost(1_000, 10, (1.0,)),
        claim_large=ClaimCost(20_000, 10, (1.2,)),
        started_at="now",
        seconds=1.0,
    )


def test_writing_the_doc_keeps_the_hand_written_text(tmp_path: Path) -> None:
    path = tmp_path / "PERFORMANCE.md"
    write_performance(_report(), path)
    first = path.read_text()
    assert BEGIN in first and END in first
    path.write_text(
        "# Hand-written title\n\nintro\n\n" + first[first.index(BEGIN) :] + "\n## Why\n"
    )
    write_performance(_report(), path)
    again = path.read_text()
    assert again.startswith("# Hand-written title\n\nintro\n\n" + BEGIN)
    assert again.endswith(END + "\n\n## Why\n")
    assert again.count(BEGIN) == 1
