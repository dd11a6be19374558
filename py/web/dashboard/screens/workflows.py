"""The workflows screen: every workflow and batch of the project by state, and one of them
with its graph (a workflow) or its progress and callbacks (a batch).

Reads ``GET /api/v1/workflows`` and ``GET /api/v1/workflows/{id}`` only, so it shows exactly
what the API serves to the session's user (a foreign id is the not-found page). Its forms
(cancel, retry, skip a node, seal a batch) post to
:mod:`codity.web.dashboard.screens.workflow_actions`.

A workflow's graph is drawn here, on the server, as an inline SVG
(:mod:`codity.web.dashboard.workflow_graph`): every node a box linking to its job, coloured
by its status and saying it in words, up to 200 nodes; past that, each layer's nodes grouped
by queue, task and status into one box with a count. The page is whole without script; the
list and the graph with its counts are fragments re-rendered on ``codity:changed`` (a job of
the project changed), so a running workflow fills in without a reload. The filters (state
tab, kind) and the page cursor live in the URL, and a fragment is fetched with the same
query.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from starlette.responses import Response

from codity.web.dashboard.page import Page, PageContext
from codity.web.dashboard.screens.workflow_actions import SKIPPABLE, flash
from codity.web.dashboard.workflow_graph import draw_workflow
from codity.web.endpoints.workflows import ACTIVE, STATES

__all__ = ["PAGES", "progress"]

_PAGE_SIZE = 50
TABLE_ROWS = 200
"""A workflow page lists at most this many nodes (the graph shows them all, or groups)."""
_TAB_LABELS = {
    "all": "All",
    "running": "Running",
    "held": "Held",
    "failed": "Failed",
    "completed": "Completed",
    "open": "Open batches",
}
_KIND_LABELS = {"all": "Workflows and batches", "workflow": "Workflows", "batch": "Batches"}
_STATE_TONE = {"running": "warn", "held": "warn", "failed": "bad", "completed": "ok"}
_CALLBACK_WORDS = {
    "all_done": "when every member finished",
    "all_succeeded": "when every member completed",
    "any_dead": "when a member was dead-lettered",
}
# The stacked progress bar: segments in this order, each the statuses it counts.
_SEGMENTS = (
    ("completed", "ok", ("completed",)),
    ("dead or failed", "bad", ("dead_letter", "failed")),
    ("cancelled", "muted", ("cancelled",)),
    ("running", "warn", ("claimed", "running")),
    ("queued", "queued", ("queued", "scheduled")),
    ("waiting", "idle", ("waiting",)),
)


def progress(counts: dict[str, int]) -> dict[str, Any]:
    """A stacked bar (widths in percent of the total) and its sentence."""
    total = sum(counts.values())
    segments, x = [], 0.0
    for label, tone, statuses in _SEGMENTS:
        n = sum(counts.get(s, 0) for s in statuses)
        if n and total:
            width = 100 * n / total
            segments.append(
                {
                    "label": label,
                    "tone": tone,
                    "count": n,
                    "x": round(x, 3),
                    "width": round(width, 3),
                }
            )
            x += width
    finished = sum(counts.get(s, 0) for s in ("completed", "dead_letter", "cancelled"))
    words = ", ".join(f"{s['count']:,} {s['label']}" for s in segments) or "no jobs"
    return {
        "segments": segments,
        "total": total,
        "finished": finished,
        "percent": round(100 * finished / total) if total else 100,
        "sentence": f"{finished:,} of {total:,} finished: {words}",
    }


def _filters(ctx: PageContext) -> dict[str, str]:
    query = ctx.request.query_params
    state, kind = query.get("state", "all"), query.get("kind", "all")
    filters = {
        "state": state if state in _TAB_LABELS else "all",
        "kind": kind if kind in _KIND_LABELS else "all",
    }
    if query.get("cursor"):
        filters["cursor"] = query["cursor"]
    return filters


def _url(**filters: str) -> str:
    return urlencode({k: v for k, v in filters.items() if v and v != "all"})


async def _listing(ctx: PageContext) -> dict[str, Any]:
    filters = _filters(ctx)
    query: dict[str, Any] = {"limit": _PAGE_SIZE}
    for name in ("state", "kind"):
        if filters[name] != "all":
            query[name] = filters[name]
    if "cursor" in filters:
        query["cursor"] = filters["cursor"]
    listed = await ctx.api("GET", "/api/v1/workflows", query=query)
    rows = listed["data"]
    for w in rows:
        w["progress"] = progress(w["member_counts"] or w["counts"])
        w["tone"] = _STATE_TONE.get(w["state"], "")
    next_cursor = listed["meta"]["next_cursor"]
    kind = filters["kind"]
    return {
        "workflows": rows,
        "filters": filters,
        "query": _url(**filters),
        "tabs": [
            {
                "state": s,
                "label": label,
                "href": "/workflows?" + _url(state=s, kind=kind),
                "current": s == filters["state"],
            }
            for s, label in _TAB_LABELS.items()
        ],
        "kinds": [
            {
                "kind": k,
                "label": label,
                "href": "/workflows?" + _url(state=filters["state"], kind=k),
                "current": k == kind,
            }
            for k, label in _KIND_LABELS.items()
        ],
        "first_page": "cursor" not in filters,
        "newest_query": _url(state=filters["state"], kind=kind),
        "next_query": _url(state=filters["state"], kind=kind, cursor=next_cursor)
        if next_cursor
        else None,
    }


async def workflows_page(ctx: PageContext) -> Response:
    return await ctx.screen(
        "workflows.html", title="Workflows", active="Workflows", live=True, **await _listing(ctx)
    )


async def workflows_fragment(ctx: PageContext) -> Response:
    return ctx.render("fragments/workflows.html", **await _listing(ctx))


def _interest(node: dict[str, Any]) -> tuple[int, int, int]:
    rank = (
        0
        if node["status"] in ("dead_letter", "cancelled", "failed")
        else (1 if node["status"] in ("claimed", "running") else 2)
    )
    return rank, node["depth"], node["id"]


async def _workflow(ctx: PageContext) -> dict[str, Any]:
    """The workflow with what its page shows. A batch (or a workflow of at most
    TABLE_ROWS nodes) is read once with TABLE_ROWS nodes; a larger workflow again whole."""
    params = {"workflow_id": ctx.path_params["workflow_id"]}
    path = "/api/v1/workflows/{workflow_id:int}"
    workflow: dict[str, Any] = await ctx.api(
        "GET", path, params=params, query={"max_nodes": TABLE_ROWS}
    )
    if workflow["kind"] == "workflow" and workflow["nodes_truncated"]:
        workflow = await ctx.api("GET", path, params=params)
    nodes, edges = workflow.pop("nodes"), workflow.pop("edges")
    counts = workflow["counts"]
    view: dict[str, Any] = {
        "workflow": workflow,
        "drawing": None,
        "skippable": SKIPPABLE,
        "unfinished": counts["waiting"] + sum(counts[s] for s in ACTIVE),
        "failed_nodes": counts["dead_letter"] + counts["cancelled"],
    }
    workflow["tone"] = _STATE_TONE.get(workflow["state"], "")
    if workflow["kind"] == "workflow":
        view["drawing"] = draw_workflow(nodes, edges)
        workflow["progress"] = progress(workflow["counts"])
    else:
        workflow["progress"] = progress(workflow["member_counts"] or {})
        for c in workflow["callbacks"]:
            c["when"] = _CALLBACK_WORDS.get(c["node_key"], "")
            c["tone"] = {"completed": "ok", "dead_letter": "bad"}.get(c["status"], "")
        nodes = [n for n in nodes if n["node_key"] is None]
    total = sum((workflow["member_counts"] or workflow["counts"]).values())
    every = len(nodes) >= total and total <= TABLE_ROWS
    table = sorted(nodes, key=(lambda n: (n["depth"], n["id"])) if every else _interest)
    view |= {"nodes": table[:TABLE_ROWS], "nodes_total": total, "nodes_all": every}
    return view


def _title(workflow: dict[str, Any]) -> str:
    noun = "Batch" if workflow["kind"] == "batch" else "Workflow"
    return f"{noun} {workflow['name'] or workflow['id']}"


async def workflow_page(ctx: PageContext) -> Response:
    view = await _workflow(ctx)
    return await ctx.screen(
        "workflow.html",
        title=_title(view["workflow"]),
        active="Workflows",
        live=True,
        flash=flash(ctx),
        **view,
    )


async def workflow_fragment(ctx: PageContext) -> Response:
    return ctx.render("fragments/workflow.html", **await _workflow(ctx))


assert set(_TAB_LABELS) == {"all", *STATES}, "a tab per state"

PAGES = [
    Page("GET", "/workflows", workflows_page, "Workflows"),
    Page("GET", "/fragments/workflows", workflows_fragment, "Workflows (fragment)"),
    Page("GET", "/workflows/{workflow_id:int}", workflow_page, "Workflow"),
    Page("GET", "/fragments/workflows/{workflow_id:int}", workflow_fragment, "Workflow (fragment)"),
]
