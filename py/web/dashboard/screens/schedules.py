"""The schedules screen: every cron schedule in plain words, when it runs next, what it ran.

Reads ``GET /api/v1/schedules`` (each with ``description``, the cron in words, and the state
of the job it last enqueued), ``GET .../{name}``, ``.../{name}/next-runs`` and
``.../{name}/jobs``; acts through ``POST .../{name}/pause`` and ``/resume`` (admin+) and
``POST .../{name}/run`` (member+, "Run now"). A next run moves on with the clock and no
NOTIFY says so, so both fragments re-render on the 2-second ``codity:tick`` as well as on
``codity:changed``. An action redirects back to the schedule's page with a message in the
query, and "Run now" links the job it enqueued.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from starlette.responses import Response

from codity.web.dashboard.page import Page, PageContext

__all__ = ["PAGES"]

_PAGE_SIZE = 100
_NEXT_RUNS = 5
_RECENT_JOBS = 10
_DONE = {"paused": "Paused.", "resumed": "Resumed from its next occurrence after now."}


async def _schedules(ctx: PageContext) -> dict[str, Any]:
    cursor = ctx.request.query_params.get("cursor") or None
    query: dict[str, Any] = {"limit": _PAGE_SIZE}
    if cursor:
        query["cursor"] = cursor
    listed = await ctx.api("GET", "/api/v1/schedules", query=query)
    next_cursor = listed["meta"]["next_cursor"]
    return {
        "schedules": listed["data"],
        "query": urlencode({"cursor": cursor} if cursor else {}),
        "first_page": cursor is None,
        "next_query": urlencode({"cursor": next_cursor}) if next_cursor else None,
    }


async def schedules_page(ctx: PageContext) -> Response:
    return await ctx.screen(
        "schedules.html", title="Schedules", active="Schedules", live=True, **await _schedules(ctx)
    )


async def schedules_fragment(ctx: PageContext) -> Response:
    return ctx.render("fragments/schedules.html", **await _schedules(ctx))


async def _schedule(ctx: PageContext) -> dict[str, Any]:
    """The schedule, its next runs and its newest jobs: three reads, each 404 alike."""
    params = {"name": ctx.path_params["name"]}
    schedule = await ctx.api("GET", "/api/v1/schedules/{name}", params=params)
    runs = await ctx.api(
        "GET",
        "/api/v1/schedules/{name}/next-runs",
        params=params,
        query={"count": _NEXT_RUNS},
    )
    jobs = await ctx.api(
        "GET", "/api/v1/schedules/{name}/jobs", params=params, query={"limit": _RECENT_JOBS}
    )
    return {"schedule": schedule, "runs": runs["runs"], "jobs": jobs}


def _flash(ctx: PageContext) -> tuple[str | None, int | None]:
    """The message an action left in the redirect's query (known words only, so a crafted
    link cannot make the page say anything else) and the job "Run now" enqueued."""
    query = ctx.request.query_params
    done = query.get("done", "")
    job = query.get("job", "")
    if done == "run" and job.isdigit() and len(job) < 19:
        return "Enqueued", int(job)
    return _DONE.get(done), None


async def schedule_page(ctx: PageContext) -> Response:
    values = await _schedule(ctx)
    flash, run_job = _flash(ctx)
    return await ctx.screen(
        "schedule.html",
        title=f"Schedule {values['schedule']['name']}",
        active="Schedules",
        live=True,
        flash=flash,
        run_job=run_job,
        **values,
    )


async def schedule_fragment(ctx: PageContext) -> Response:
    return ctx.render("fragments/schedule.html", **await _schedule(ctx))


def _back(name: str, **done: Any) -> str:
    return f"/schedules/{quote(name, safe='')}?{urlencode(done)}"


async def pause(ctx: PageContext) -> Response:
    name = ctx.path_params["name"]
    await ctx.api("POST", "/api/v1/schedules/{name}/pause", params={"name": name})
    return ctx.redirect(_back(name, done="paused"))


async def resume(ctx: PageContext) -> Response:
    name = ctx.path_params["name"]
    await ctx.api("POST", "/api/v1/schedules/{name}/resume", params={"name": name})
    return ctx.redirect(_back(name, done="resumed"))


async def run_now(ctx: PageContext) -> Response:
    name = ctx.path_params["name"]
    ran = await ctx.api("POST", "/api/v1/schedules/{name}/run", params={"name": name})
    return ctx.redirect(_back(name, done="run", job=ran["job_id"]))


PAGES = [
    Page("GET", "/schedules", schedules_page, "Schedules"),
    Page("GET", "/fragments/schedules", schedules_fragment, "Schedules (fragment)"),
    Page("GET", "/schedules/{name}", schedule_page, "Schedule"),
    Page("GET", "/fragments/schedules/{name}", schedule_fragment, "Schedule (fragment)"),
    Page("POST", "/schedules/{name}/pause", pause, "Pause a schedule"),
    Page("POST", "/schedules/{name}/resume", resume, "Resume a schedule"),
    Page("POST", "/schedules/{name}/run", run_now, "Run a schedule now"),
]
