"""Every page of the dashboard, as data: what ``mount_pages`` turns into routes.

Screens own their pages (``codity.web.dashboard.screens.*.PAGES``); this list is the only
place they are gathered, so the drift test and the isolation matrix walk exactly what the
app serves.
"""

from __future__ import annotations

from pathlib import Path

from codity.web.dashboard.page import Page
from codity.web.dashboard.screens import (
    auth,
    dead_letters,
    events,
    jobs,
    overview,
    queues,
    schedules,
    settings,
    workers,
    workflow_actions,
    workflows,
)

__all__ = ["DASHBOARD_PAGES", "static_dir"]

DASHBOARD_PAGES: tuple[Page, ...] = (
    *auth.PAGES,
    *overview.PAGES,
    *queues.PAGES,
    *jobs.PAGES,
    *workflows.PAGES,
    *workflow_actions.PAGES,
    *dead_letters.PAGES,
    *schedules.PAGES,
    *workers.PAGES,
    *settings.PAGES,
    *events.PAGES,
)


def static_dir() -> Path:
    """htmx (vendored, see static/VENDORED.md), dashboard.js and dashboard.css."""
    return Path(__file__).resolve().parent / "static"
