"""The jobs screen (to be filled)."""

from __future__ import annotations

from codity.web.dashboard.page import Page

__all__ = ["PAGES"]

PAGES: list[Page] = []
