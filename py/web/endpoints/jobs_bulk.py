"""Bulk actions on jobs: cancel or retry the selected ones, or every job matching a filter.

(Being built: see issue 11.)
"""

from __future__ import annotations

from codity.web.endpoint import Endpoint

__all__ = ["ROUTES"]

ROUTES: list[Endpoint] = []
