"""``codity bench-dashboard`` times every dashboard page: a new page must get its path filled.

The bench walks ``DASHBOARD_PAGES`` and fills each path parameter from its world; a page
added with a parameter the world has no value for stopped the whole bench at its first
page (the workflow page did, unseen, until a later session ran the bench). This fails the
day a page is added without a value, in the default suite, instead.
"""

from __future__ import annotations

from codity.bench.dashboard_run import _page_paths
from codity.bench.dashboard_world import World
from codity.web.dashboard.routes import DASHBOARD_PAGES


def test_every_get_page_is_timed_with_its_parameters_filled() -> None:
    world = World(
        jobs=1, executions=1, failed_executions=0, dead_letters=1, seconds=0.0,
        sample_job=11, sample_dead_letter=12, sample_worker=13, sample_dead_worker=14,
        sample_schedule="schedule-01", sample_workflow=15,
    )  # fmt: skip
    paths = _page_paths(world)
    assert not [p for p in paths if "{" in p], paths
    gets = [p for p in DASHBOARD_PAGES if p.method == "GET"]
    assert "/workflows/15" in paths and "/fragments/workflows/15" in paths
    assert len(set(paths)) >= len(gets) - 3  # all but the three the bench times otherwise
