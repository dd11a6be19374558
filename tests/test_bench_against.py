"""``codity bench --against pgqueuer`` runs both systems end to end and reports every figure.

As for ``codity bench``, performance is measured by the command, never asserted here: the
quick run must complete against a real server with real worker processes of both systems
(PGQueuer installed into its own virtual environment on first use), report positive
figures for both in every row of the side-by-side table, leave docs/PERFORMANCE.md alone
under --no-write and drop its scratch databases. Writing the document keeps the text
around the generated block.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import psycopg
import pytest

from codity.bench._against_model import (
    CODITY,
    PGQUEUER,
    AgainstOptions,
    AgainstReport,
    Ceiling,
    DrainRun,
    EnqueueRun,
    PickupRun,
    Series,
)
from codity.bench._against_report import BEGIN, END, HEADING, write_against
from codity.bench._ceiling import CEILINGS
from codity.bench._model import Machine
from codity.bench._report import performance_path
from codity.bench.against_pgqueuer import configurations
from codity.supervisor import codity_command

COMMAND = codity_command()
ROWS = (
    "drain, 2 processes, best configuration",
    "drain, 1 process, best configuration",
    "drain at each system's defaults, 2 processes",
    "WAL written per job during the drain, 2 processes, best configuration",
    "WAL written per job during the drain, 2 processes, defaults",
    "enqueue, batches of 1,000",
    "enqueue, one by one",
)


def _rows(output: str, cells: int) -> dict[str, list[str]]:
    """The rows of the printed tables with ``cells`` columns: first cell -> the others.
    The side-by-side table has 4 (label, Codity, PGQueuer, ratio), the ceiling's 5 (drain,
    jobs/s, WAL per job, CPU per job, share)."""
    rows = {}
    for line in output.splitlines():
        row = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(row) == cells:
            rows[row[0]] = row[1:]
    return rows


def _number(text: str) -> float:
    found = re.search(r"[\d,]+(?:\.\d+)?", text)
    assert found, f"no number in {text!r}"
    return float(found[0].replace(",", ""))


@pytest.mark.slow  # installs PGQueuer on first use, then a quick run of both: about 1-2 min
def test_quick_run_reports_both_systems_side_by_side(pg_server_url: str) -> None:
    doc = performance_path()
    before = doc.read_bytes() if doc.exists() else None
    env = os.environ | {"DATABASE_URL": pg_server_url, "WORKER_POLL_INTERVAL_MS": "200"}
    run = subprocess.run(
        [*COMMAND, "bench", "--against", "pgqueuer", "--quick", "--no-write"],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr[-5000:]
    rows = _rows(run.stdout, 4)

    for label in ROWS:
        ours, theirs, ratio = rows[label]
        assert _number(ours) > 0 and _number(theirs) > 0 and _number(ratio) > 0, (label, rows)
    ours, theirs, _ = rows["pickup p50 / p99, producer's commit included"]
    for cell in (ours, theirs):
        p50, p99 = (float(x) for x in re.findall(r"[\d.]+", cell)[:2])
        assert 0 < p50 <= p99, cell
    assert "PGQueuer 1.6." in run.stdout
    ceiling = _rows(run.stdout, 5)
    for name in CEILINGS:
        rate, wal, _cpu, share = ceiling[name]
        assert _number(rate) > 0 and _number(wal) > 0 and _number(share) > 0, (name, ceiling)

    assert (doc.read_bytes() if doc.exists() else None) == before, "--no-write wrote the doc"
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        left = conn.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE 'codity_bench%'"
        ).fetchall()
    assert left == [], "a scratch database was not dropped"


def test_pgqueuer_matrix_holds_only_configurations_it_accepts() -> None:
    for quick in (True, False):
        configs = configurations(quick)
        assert len(set(configs)) == len(configs)
        for c in configs:
            # pgq run refuses a --max-concurrent-tasks below twice the batch size.
            assert c.system != PGQUEUER or c.limit is None or c.limit >= 2 * c.batch, c
        assert sum(c.default for c in configs) == 2
        assert {c.processes for c in configs if not c.default} == {1, 2}


def _report() -> AgainstReport:
    """A report of made-up figures, to write the document with."""
    run = DrainRun(jobs=10, seconds=1.0, wal_bytes=20_000, server_cpu_s=0.01, workers_cpu_s=0.01)
    series = tuple(Series(c, (run,)) for c in configurations(quick=True))
    enqueues = tuple(
        EnqueueRun(system, 10, batch, 1.0) for system in (CODITY, PGQUEUER) for batch in (1, 1_000)
    )
    pickups = tuple(PickupRun(s, (2.0, 3.0), (1.0, 2.0)) for s in (CODITY, PGQUEUER))
    ceilings = tuple(Ceiling(name, (run,)) for name in CEILINGS)
    machine = Machine(2, "cpu", 1.0, (0.0, 0.0, 0.0), (0.0, 0.0, 0.0), "py", "pg", ())
    return AgainstReport(
        options=AgainstOptions.quick_defaults(),
        machine=machine,
        commit="abc1234",
        pgqueuer_version="1.6.0",
        series=series,
        enqueues=enqueues,
        pickups=pickups,
        ceilings=ceilings,
        started_at="now",
        seconds=1.0,
    )


def test_writing_the_section_keeps_the_text_around_it(tmp_path: Path) -> None:
    path = tmp_path / "PERFORMANCE.md"
    path.write_text("# Performance\n\nintro\n")
    write_against(_report(), path)
    first = path.read_text()
    assert first.startswith("# Performance\n\nintro\n\n" + HEADING + "\n\n" + BEGIN)
    edited = first.replace(END, END + "\n\n## Why\n\nby hand").replace("intro", "intro, edited")
    path.write_text(edited)
    write_against(_report(), path)
    assert path.read_text() == edited, "the text around the block changed"
