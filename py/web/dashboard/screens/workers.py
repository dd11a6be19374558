"""The workers screen: every worker of the project with its liveness, and one worker's jobs.

Reads ``GET /api/v1/workers`` and ``GET /api/v1/workers/{id}`` only. A worker that dies
silently sends no NOTIFY, so both fragments re-render on the 2-second ``codity:tick`` as
well as on ``codity:changed``: a SIGKILLed worker turns red within the dead-worker threshold
plus one tick, without a reload. Rows carry ``id="worker-<id>"`` and ``data-liveness`` so a
browser test can watch one. The filter (all workers, or live ones only) and the page cursor
live in the URL, and the fragment is fetched with the same query, so a refresh keeps both.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from starlette.responses import Response

from codity.web.dashboard.page import Page, PageContext

__all__ = ["PAGES"]

_SHOWS = ("all", "live")
_PAGE_SIZE = 100


def _filters(ctx: PageContext) -> dict[str, str]:
    """The URL's filter, normalized: ``show`` is all (default) or live; ``cursor`` as given
    (the API refuses one it did not hand out)."""
    query = ctx.request.query_params
    show = query.get("show", "all")
    filters = {"show": show if show in _SHOWS else "all"}
    if query.get("cursor"):
        filters["cursor"] = query["cursor"]
    return filters


async def _workers(ctx: PageContext) -> dict[str, Any]:
    filters = _filters(ctx)
    query: dict[str, Any] = {"limit": _PAGE_SIZE}
    if filters["show"] == "live":
        query["live"] = True
    if "cursor" in filters:
        query["cursor"] = filters["cursor"]
    listed = await ctx.api("GET", "/api/v1/workers", query=query)
    next_cursor = listed["meta"]["next_cursor"]
    return {
        "workers": listed["data"],
        "show": filters["show"],
        "query": urlencode(filters),
        "first_page": "cursor" not in filters,
        "next_query": urlencode({"show": filters["show"], "cursor": next_cursor})
        if next_cursor
        else None,
    }


async def workers_page(ctx: PageContext) -> Response:
    return await ctx.screen(
        "workers.html", title="Workers", active="Workers", live=True, **await _workers(ctx)
    )


async def workers_fragment(ctx: PageContext) -> Response:
    return ctx.render("fragments/workers.html", **await _workers(ctx))


async def _worker(ctx: PageContext) -> dict[str, Any]:
    worker: dict[str, Any] = await ctx.api(
        "GET",
        "/api/v1/workers/{worker_id:int}",
        params={"worker_id": ctx.path_params["worker_id"]},
    )
    return worker


async def worker_page(ctx: PageContext) -> Response:
    worker = await _worker(ctx)
    return await ctx.screen(
        "worker.html",
        title=f"Worker {worker['name']}",
        active="Workers",
        live=True,
        worker=worker,
    )


async def worker_fragment(ctx: PageContext) -> Response:
    return ctx.render("fragments/worker.html", worker=await _worker(ctx))


PAGES = [
    Page("GET", "/workers", workers_page, "Workers"),
    Page("GET", "/fragments/workers", workers_fragment, "Workers (fragment)"),
    Page("GET", "/workers/{worker_id:int}", worker_page, "Worker"),
    Page("GET", "/fragments/workers/{worker_id:int}", worker_fragment, "Worker (fragment)"),
]
