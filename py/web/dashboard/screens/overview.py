"""The overview: the project's queues and totals at a glance, live.

Reads ``GET /api/v1/overview`` only; the fragment is what the live stream re-renders.
"""

from __future__ import annotations

from starlette.responses import Response

from codity.web.dashboard.page import Page, PageContext

__all__ = ["PAGES"]


async def overview(ctx: PageContext) -> Response:
    data = await ctx.api("GET", "/api/v1/overview")
    return await ctx.screen(
        "overview.html", title="Overview", active="Overview", live=True, overview=data
    )


async def overview_fragment(ctx: PageContext) -> Response:
    data = await ctx.api("GET", "/api/v1/overview")
    return ctx.render("fragments/overview.html", overview=data)


PAGES = [
    Page("GET", "/", overview, "Overview"),
    Page("GET", "/fragments/overview", overview_fragment, "Overview (fragment)"),
]
