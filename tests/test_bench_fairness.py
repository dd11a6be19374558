"""``codity bench --fairness`` runs end to end, on a small backlog.

It went unrun for a while and broke unseen: its drains emptied ``codity.jobs`` with a
TRUNCATE that the workflow tables' foreign keys (issue 27) refused. This runs the bench's
own function on the test server, so a change to the schema that breaks it fails here.
"""

from __future__ import annotations

import pytest

from codity.bench.fairness import run_fairness


@pytest.mark.slow  # four scenarios, each drained alone and beside a trickle: ~25 s
def test_every_scenario_drains_and_the_trickle_is_served(db_url: str) -> None:
    runs, server = run_fairness(db_url, bulk=2000, rate=10.0)
    assert server.startswith("PostgreSQL "), server
    assert len(runs) == 4
    for run in runs:
        assert run.alone_jobs_s > 0 and run.beside_jobs_s > 0, run
        assert run.trickle, f"{run.order}: no trickle job was served while bulk drained"
        assert run.pickup(0.99) < 1.0, (run.order, sorted(run.trickle)[-3:])
