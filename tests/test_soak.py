"""``codity soak`` runs end to end: a row per window, the verdicts, every job completed once.

The soak is a measurement (docs/PERFORMANCE.md, "Retention soak"), so no figure of it is
asserted here: a run of a few seconds against the test server must print its rows, count
every job it enqueued as completed exactly once and drop its scratch database; and a bad
option is refused before any database is touched.
"""

from __future__ import annotations

import psycopg
import pytest

from codity.bench.soak import SoakOptions, run_soak_command
from codity.cli import main


def _table(output: str) -> list[list[str]]:
    """The cells of every Markdown table row of the output, separator rows left out."""
    rows = []
    for line in output.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and not set("".join(cells)) <= {"-", ":"}:
            rows.append(cells)
    return rows


@pytest.mark.slow  # about 20 s of real workers, scheduler and producer: CI runs it (.ci/run)
def test_short_soak_prints_rows_and_completes_every_job_once(
    pg_server_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    options = SoakOptions(minutes=0.25, rate=200, sample=5, keep=60)
    run_soak_command(pg_server_url, options)  # 0 or 1: the verdicts are figures, not asserted
    rows = _table(capsys.readouterr().out)

    samples = [r for r in rows if r[0].isdigit()]
    assert len(samples) == 3, rows
    assert [int(r[0]) for r in samples] == pytest.approx([5, 10, 15], abs=1)
    assert all(int(r[1].replace(",", "")) > 0 for r in samples), samples  # completed/s
    once = [r for r in rows if r[0] == "Every job enqueued completed exactly once"]
    assert len(once) == 1 and once[0][2] == "pass", once
    enqueued = int(once[0][1].split()[0].replace(",", ""))
    assert 2_800 <= enqueued <= 4_000, once  # 200 jobs/s for 15 s, and until the last row

    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        left = conn.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE 'codity_soak%'"
        ).fetchall()
    assert left == [], "the scratch database was not dropped"


def test_a_window_longer_than_retention_is_refused_before_connecting(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Nowhere to connect to: the refusal must come first.
    monkeypatch.setenv("DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    assert main(["soak", "--sample", "60", "--keep", "60"]) == 1
    assert "--sample must be positive and shorter than --keep" in capsys.readouterr().err
