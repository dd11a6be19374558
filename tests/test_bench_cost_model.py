"""``codity bench --cost-model`` counts what is in the WAL, and runs every system end to end.

Figures are measured by the command, never asserted here. What is proven:

- the WAL reading (codity.bench._wal_records) counts exactly what a known write makes: rows
  inserted, updated in place or not, deleted and locked, index entries per index, and
  commits, on the suite's own server;
- a tiny run of the whole command drives Codity and both peers through the three phases,
  each drain exactly once (the drains raise otherwise), with the statements of the systems'
  own processes counted and the bench's own polls left out, and leaves no server behind.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from codity.bench._against_model import CODITY, GRAPHILE, PGQUEUER
from codity.bench._cost_model import DRAIN, ENQUEUE, ENQUEUE_BATCHED, PHASES, CostOptions
from codity.bench._cost_report import render_cost
from codity.bench._usage import read_usage, spent_since
from codity.bench._wal_records import read_span
from codity.bench.cost_model import run_cost_model
from codity.config import load_settings


def _span(conn: psycopg.Connection, *statements: str):  # type: ignore[no-untyped-def]
    before = read_usage(conn, None)
    for statement in statements:
        conn.execute(statement)
    return read_span(conn, spent_since(conn, before, None).wal_window)


def test_a_known_write_is_counted_row_by_row_and_entry_by_entry(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE walcount (id int PRIMARY KEY, note text, tag int)")
        conn.execute("CREATE INDEX walcount_tag ON walcount (tag)")

        inserted = _span(
            conn, "INSERT INTO walcount SELECT g, 'x', g FROM generate_series(1, 40) g"
        )
        assert inserted.row_versions() == {"inserted": 40}
        # 40 rows, two indexes: 80 entries, and the one transaction committed.
        assert inserted.index_entries() == 80
        assert inserted.commits == 1
        rows = {r[0]: r for r in inserted.by_relation()}
        assert rows["public.walcount_pkey"][5] == 40 and rows["public.walcount_tag"][5] == 40

        # An unindexed column: updated in place (HOT), no index entry.
        hot = _span(conn, "UPDATE walcount SET note = 'y' WHERE id <= 10")
        assert hot.row_versions() == {"updated (HOT)": 10}
        assert hot.index_entries() == 0
        # An indexed column: a new version and an entry in every index.
        cold = _span(conn, "UPDATE walcount SET tag = tag + 100 WHERE id <= 5")
        assert cold.row_versions() == {"updated": 5}
        assert cold.index_entries() == 10

        locked = _span(conn, "BEGIN", "SELECT * FROM walcount WHERE id <= 3 FOR UPDATE",
                       "COMMIT")  # fmt: skip
        assert locked.row_versions() == {"locked": 3}
        deleted = _span(conn, "DELETE FROM walcount WHERE id > 30")
        assert deleted.row_versions() == {"deleted": 10}
        assert deleted.index_entries() == 0
        assert deleted.bytes > 0


@pytest.mark.slow  # the peers' installs (cached after the first), then three tiny runs: ~30 s
def test_a_tiny_run_measures_every_phase_of_every_system(tmp_path: Path) -> None:
    options = CostOptions(jobs=300, single=20)
    report = run_cost_model(load_settings().home, options)

    assert report.unavailable == ()
    assert report.systems == [CODITY, GRAPHILE, PGQUEUER]
    for system in report.systems:
        for phase in PHASES:
            p = report.phase(system, phase)
            assert p is not None, (system, phase)
            assert p.wal_bytes > 0 and p.span.bytes > 0, p
            assert p.statements is not None and p.statements > 0, p
            expected = options.single if phase == ENQUEUE else options.jobs
            assert p.jobs == expected
    # One call per job: the bench's own reads and polls are not counted as the system's.
    one_by_one = report.phase(CODITY, ENQUEUE)
    assert one_by_one is not None and one_by_one.statements == options.single
    codity = report.phase(CODITY, DRAIN)
    assert codity is not None
    relations = {r[0]: r for r in codity.span.by_relation()}
    # Every job: its row updated at the claim and at the completion, an execution inserted.
    assert relations["codity.jobs"][4] == 2 * options.jobs
    assert relations["codity.job_executions"][4] == options.jobs
    graphile = report.phase(GRAPHILE, DRAIN)
    assert graphile is not None and graphile.span.row_versions()["deleted"] == options.jobs
    batched = report.phase(CODITY, ENQUEUE_BATCHED)
    assert batched is not None and batched.span.row_versions()["inserted"] == options.jobs
    text = render_cost(report, "test")
    assert "### From enqueue to completion" in text
    assert "`codity.jobs`" in text and "`graphile_worker._private_jobs`" in text
