"""The queues screens: every queue with its state, policy and depth; one queue with its retry
policy, live counts, depth and throughput over time, and pause / resume for admins.

Reads ``GET /api/v1/queues``, ``/api/v1/overview``, ``/api/v1/queues/{name}``,
``/api/v1/queues/{name}/stats`` and ``/api/v1/queues/{name}/history``; pause and resume
post to the API's own endpoints (admin+; the API refuses anyone else, whatever the page
showed). A queue of another project, or none, is the one not-found page, as in the API.

History is one point a minute from the rollup; over 6 h or 24 h the charts would have more
bars than pixels, so points are grouped into at most 120 bars: throughput adds up, depth
keeps each group's peak (the number that matters when a backlog spikes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from starlette.responses import Response

from codity.web.dashboard.page import Page, PageContext
from codity.web.dashboard.screens.overview import THROUGHPUT, Series, bar_chart, label_minutes
from codity.web.errors import ApiError

__all__ = ["DEPTH", "PAGES", "RANGES", "bucket"]

RANGES: dict[str, tuple[int, int]] = {"1h": (60, 1), "6h": (360, 3), "24h": (1440, 12)}
"""The history a page may ask for (``?range=``): minutes of history, minutes per bar."""

DEPTH = (
    Series("claimable", "claimable", "claimable"),
    Series("scheduled", "scheduled", "scheduled"),
    Series("running", "running", "running"),
)
_SUMMED = ("completed", "failed", "dead_lettered")
_PEAKED = ("claimable", "scheduled", "running")


def bucket(points: Sequence[Mapping[str, Any]], size: int) -> list[dict[str, Any]]:
    """Consecutive groups of ``size`` minutes as one point each (``minute`` the first,
    ``last_minute`` the last): events summed, depth at its peak."""
    grouped = []
    for start in range(0, len(points), size):
        group = points[start : start + size]
        point: dict[str, Any] = {"minute": group[0]["minute"], "last_minute": group[-1]["minute"]}
        point.update({key: sum(int(p[key]) for p in group) for key in _SUMMED})
        point.update({key: max(int(p[key]) for p in group) for key in _PEAKED})
        grouped.append(point)
    return grouped


def _path(name: str) -> str:
    return f"/queues/{quote(name, safe='')}"


def _name(ctx: PageContext) -> str:
    return str(ctx.path_params["name"])


async def _rows(ctx: PageContext) -> list[dict[str, Any]]:
    """Each queue's policy joined with its counts and problems from the overview."""
    policies = await ctx.api("GET", "/api/v1/queues")
    overview = await ctx.api("GET", "/api/v1/overview")
    counts = {q["queue"]: q for q in overview["queues"]}
    return [{**p, "counts": counts.get(p["name"])} for p in policies]


async def queue_list(ctx: PageContext) -> Response:
    return await ctx.screen(
        "queues.html", title="Queues", active="Queues", live=True, queues=await _rows(ctx)
    )


async def queue_list_fragment(ctx: PageContext) -> Response:
    return ctx.render("fragments/queues.html", queues=await _rows(ctx))


def _range(ctx: PageContext) -> str:
    chosen = ctx.request.query_params.get("range", "1h")
    if chosen not in RANGES:
        raise ApiError(422, "invalid_input", f"range must be one of {', '.join(RANGES)}")
    return chosen


async def _stats(ctx: PageContext, name: str) -> Any:
    return await ctx.api("GET", "/api/v1/queues/{name}/stats", params={"name": name})


async def queue_detail(ctx: PageContext) -> Response:
    return await _detail(ctx)


async def _detail(ctx: PageContext, *, status: int = 200, error: str | None = None) -> Response:
    name = _name(ctx)
    chosen = _range(ctx)
    minutes, per_bar = RANGES[chosen]
    queue = await ctx.api("GET", "/api/v1/queues/{name}", params={"name": name})
    stats = await _stats(ctx, name)
    history = await ctx.api(
        "GET", "/api/v1/queues/{name}/history", params={"name": name}, query={"minutes": minutes}
    )
    rolled = [p for p in history["points"] if p["rolled"]]
    points = label_minutes(bucket(rolled, per_bar), per_bar)
    every = "per minute" if per_bar == 1 else f"per {per_bar} minutes"
    period = {"1h": "last hour", "6h": "last 6 hours", "24h": "last 24 hours"}[chosen]
    depth = bar_chart(
        "depth",
        f"{name}: claimable, scheduled and running jobs {every}"
        + (" (peak of each group)" if per_bar > 1 else "")
        + f", {period}",
        points,
        DEPTH,
        kind="level",
        height=80,
    )
    throughput = bar_chart(
        "throughput",
        f"{name}: executions completed and failed {every}, {period}",
        points,
        THROUGHPUT,
        kind="sum",
        height=80,
    )
    return await ctx.screen(
        "queue.html",
        status=status,
        error=error,
        title=f"Queue {name}",
        active="Queues",
        live=True,
        queue=queue,
        stats=stats,
        history=history,
        chosen_range=chosen,
        ranges=list(RANGES),
        depth=depth,
        throughput=throughput,
    )


async def queue_counts_fragment(ctx: PageContext) -> Response:
    return ctx.render("fragments/queue_counts.html", stats=await _stats(ctx, _name(ctx)))


async def pause(ctx: PageContext) -> Response:
    name = _name(ctx)
    await ctx.api("POST", "/api/v1/queues/{name}/pause", params={"name": name})
    return ctx.redirect(_path(name))


async def resume(ctx: PageContext) -> Response:
    name = _name(ctx)
    await ctx.api("POST", "/api/v1/queues/{name}/resume", params={"name": name})
    return ctx.redirect(_path(name))


_LIMITS = ("max_running", "rate_limit", "rate_period_seconds")


async def set_limits(ctx: PageContext) -> Response:
    """The queue's concurrency and rate limits and its weight from the form: an empty limit
    field removes that limit, an empty weight is the default, 1. A refusal (not a whole
    number, out of range) is shown on the page with the API's message, and nothing
    changes."""
    name = _name(ctx)
    body: dict[str, int | None] = {}
    for field in (*_LIMITS, "weight"):
        text = (ctx.form.get(field) or "").strip()
        if text and not text.isdigit():
            return await _detail(ctx, status=422, error=f"{field} must be a whole number")
        body[field] = int(text) if text else (1 if field == "weight" else None)
    try:
        await ctx.api("PATCH", "/api/v1/queues/{name}", params={"name": name}, body=body)
    except ApiError as exc:
        if exc.status != 422:
            raise
        details = exc.details if isinstance(exc.details, list) else []
        where = ", ".join(str(d.get("location", [""])[-1]) for d in details if isinstance(d, dict))
        return await _detail(
            ctx, status=422, error=f"{exc.message}{f' ({where})' if where else ''}"
        )
    return ctx.redirect(_path(name))


PAGES = [
    Page("GET", "/queues", queue_list, "Queues"),
    Page("GET", "/fragments/queues", queue_list_fragment, "Queues (fragment)"),
    Page("GET", "/queues/{name}", queue_detail, "Queue"),
    Page("GET", "/fragments/queues/{name}", queue_counts_fragment, "Queue counts (fragment)"),
    Page("POST", "/queues/{name}/pause", pause, "Pause a queue"),
    Page("POST", "/queues/{name}/resume", resume, "Resume a queue"),
    Page("POST", "/queues/{name}/limits", set_limits, "Set a queue's limits and weight"),
]
