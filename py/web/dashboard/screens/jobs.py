"""The jobs screen: every job of the project by state, searched, paged, acted on in bulk;
and one job with its whole history.

Reads ``GET /api/v1/jobs`` (a page, without its count), ``GET /api/v1/jobs/counts`` (the
capped count of each state tab; the current tab's is the list's) and
``GET /api/v1/jobs/{id}``; acts through
``POST /api/v1/jobs/bulk`` (selected ids: member+; all matching: admin+) and the single
``cancel`` / ``retry`` routes (member+). The API's roles are what refuse a viewer's or a
member's forged POST; the templates only leave the controls out.

The filters live in the URL, one parameter each (see :mod:`codity.web.dashboard.search`,
which also reads the search box); a search the grammar or the API refuses is shown on the
page as a message, with no list, never as an error page. The list, with its tabs, is a
fragment re-rendered on ``codity:changed`` (a job enqueued elsewhere appears without a
reload); a checked box survives that (``hx-preserve``). "All matching" is two steps: the
confirmation page runs the API's dry run and states the exact scope and count; its form
posts the dry run's ``as_of`` back (:mod:`codity.web.dashboard.confirm`), so jobs enqueued
after the operator read the number are left alone. Every POST redirects back with a message
of numbers and known words only, so a crafted link cannot make the page say anything else.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import replace
from typing import Any
from urllib.parse import parse_qsl

from starlette.responses import Response

from codity.web.access import Role
from codity.web.dashboard.confirm import confirmed_bound
from codity.web.dashboard.page import Page, PageContext
from codity.web.dashboard.search import JobSearch, SearchError
from codity.web.endpoints.jobs import TABS
from codity.web.endpoints.jobs_bulk import APPLIES_TO
from codity.web.errors import ApiError

__all__ = ["PAGES", "scope_words"]

_PAGE_SIZE = 50
_TAB_LABELS = {
    "all": "All",
    "waiting": "Waiting",
    "scheduled": "Scheduled",
    "queued": "Queued",
    "running": "Running",
    "completed": "Completed",
    "dead_letter": "Dead letter",
    "cancelled": "Cancelled",
}
_NOUNS = {"retry": "failed job", "cancel": "unfinished job"}
_VERBS = {"retry": ("Retry", "Retried"), "cancel": ("Cancel", "Cancelled")}
_PICK = "pick-"
"""The name of a row's checkbox is ``pick-<job id>`` (one field per job: a form's fields
arrive as a dict, one value per name)."""


def scope_words(action: str, search: JobSearch, count: int) -> str:
    """The scope of an "all matching" action in words, as the confirmation states it:
    "Retry 344 failed jobs in queue emails matching task:send"."""
    noun = _NOUNS[action] + ("" if count == 1 else "s")
    words = [f"{_VERBS[action][0]} {count:,} {noun}"]
    words.append(f"in queue {search.queue}" if search.queue else "in every queue")
    statuses = TABS[search.state]
    rest = replace(search, queue="")
    if statuses is not None and set(statuses) >= set(APPLIES_TO[action]):
        rest = replace(rest, state="all")
    if text := rest.text(with_state=True):
        words.append(f"matching {text}")
    return " ".join(words)


def _require(ctx: PageContext, role: Role) -> None:
    """Refuse a role the API would refuse, before the form is read: a viewer's forged POST
    is a 403 whatever it holds (the API checks again when it is called)."""
    if ctx.role is None or ctx.role < role:
        have = ctx.role.label if ctx.role else "no role"
        raise ApiError(403, "forbidden", f"this needs the {role.label} role; you have {have}")


def _picked(form: dict[str, str]) -> list[int]:
    """The ids of a "selected" form: its checked ``pick-<id>`` boxes, and any in ``ids``
    (comma separated, for scripts and tests)."""
    words = [name[len(_PICK) :] for name in form if name.startswith(_PICK)]
    words += [w for w in re.split(r"[\s,]+", form.get("ids", "")) if w]
    if any(not (w.isascii() and w.isdigit() and len(w) <= 19) for w in words):
        raise ApiError(422, "invalid_input", "ids: job ids are whole numbers")
    if not words:
        raise ApiError(422, "invalid_input", "select at least one job first")
    return [int(w) for w in words]


def _action(value: str | None) -> str:
    if value not in _VERBS:
        raise ApiError(422, "invalid_input", "action: choose cancel or retry")
    return value


def _search_of(query: str) -> JobSearch:
    """The filters a form carried back as a query string; 422 if they are not valid."""
    try:
        return JobSearch.from_query(dict(parse_qsl(query)))
    except SearchError as exc:
        raise ApiError(422, "invalid_input", str(exc)) from None


def _number(ctx: PageContext, name: str) -> int | None:
    value = ctx.request.query_params.get(name, "")
    return int(value) if value.isascii() and value.isdigit() and len(value) < 19 else None


def _flash(ctx: PageContext) -> str | None:
    """What the POST that redirected here did: only known words and numbers."""
    done = ctx.request.query_params.get("done", "")
    if done not in _VERBS:
        return None
    affected, skipped = _number(ctx, "affected") or 0, _number(ctx, "skipped") or 0
    noun = "job" if affected == 1 else "jobs"
    message = f"{_VERBS[done][1]} {affected:,} {noun}."
    if skipped:
        message += f" Skipped {skipped:,}: not in a state to {done}, or not found."
    return message


async def _listing(ctx: PageContext) -> dict[str, Any]:
    values = ctx.request.query_params
    cursor = values.get("cursor") or None
    listing: dict[str, Any] = {"jobs": [], "tabs": [], "problem": None, "next_query": None}
    listing |= {"first_page": cursor is None, "count": 0, "count_capped": False}
    listing["typed"] = values.get("q")
    try:
        search = JobSearch.from_query(values)
    except SearchError as exc:
        # The box keeps what was typed, and the live fragment asks with the same URL, so
        # the message stays until the search is corrected.
        state = values.get("state", "all")
        search = JobSearch(state=state if state in TABS else "all")
        as_typed = ctx.request.url.query
        return {**listing, "search": search, "problem": str(exc), "query": as_typed}
    listing |= {"search": search, "query": search.url(**({"cursor": cursor} if cursor else {}))}
    try:
        # The current tab's count is the list's: asked once, with the other tabs.
        page = {**search.api_filter(), "limit": _PAGE_SIZE, "cursor": cursor, "count": False}
        listed = await ctx.api("GET", "/api/v1/jobs", query=page)
        counts = await ctx.api("GET", "/api/v1/jobs/counts", query=search.api_match())
    except ApiError as exc:
        if exc.status != 422:
            raise
        return {**listing, "problem": exc.message}
    meta = listed["meta"]
    tabs = [
        {
            **c,
            "label": _TAB_LABELS[c["state"]],
            "href": "/jobs?" + replace(search, state=c["state"]).url(),
            "current": c["state"] == search.state,
        }
        for c in counts
    ]
    current = next(c for c in counts if c["state"] == search.state)
    next_cursor = meta["next_cursor"]
    return {
        **listing,
        "jobs": listed["data"],
        "tabs": tabs,
        "count": current["count"],
        "count_capped": current["capped"],
        "next_query": search.url(cursor=next_cursor) if next_cursor else None,
        "bulk": _bulk_links(search, current["count"], current["capped"]),
    }


def _bulk_links(search: JobSearch, count: int, capped: bool) -> list[dict[str, str]]:
    """The "all matching" actions that fit the tab: retry where dead letters can be,
    cancel where unfinished jobs can be. Where every job of the tab is one the action
    applies to, the label has the tab's (capped) count; the confirmation has the exact one."""
    tab = TABS[search.state]
    statuses = set(tab or APPLIES_TO["cancel"] + APPLIES_TO["retry"])
    links = []
    for action in ("retry", "cancel"):
        applies = set(APPLIES_TO[action])
        if not statuses & applies:
            continue
        many = f" {count:,}{'+' if capped else ''}" if tab and statuses <= applies else ""
        links.append(
            {
                "label": f"{_VERBS[action][0]} all{many} matching…",
                "href": "/jobs/bulk/confirm?" + search.url(action=action),
                "action": action,
            }
        )
    return links


async def jobs_page(ctx: PageContext) -> Response:
    return await ctx.screen(
        "jobs.html",
        title="Jobs",
        active="Jobs",
        live=True,
        flash=_flash(ctx),
        **await _listing(ctx),
    )


async def jobs_fragment(ctx: PageContext) -> Response:
    return ctx.render("fragments/jobs.html", **await _listing(ctx))


async def bulk_selected(ctx: PageContext) -> Response:
    """Cancel or retry the checked rows, then back to the list as it was."""
    _require(ctx, Role.MEMBER)
    action = _action(ctx.form.get("action"))
    ids = _picked(ctx.form)
    result = await ctx.api("POST", "/api/v1/jobs/bulk", body={"action": action, "ids": ids})
    back = _search_of(ctx.form.get("back", ""))
    done = {"done": action, "affected": result["affected"], "skipped": result["skipped"]}
    return ctx.redirect("/jobs?" + back.url(**done))


async def confirm_page(ctx: PageContext) -> Response:
    """The dry run of "all matching", stated in words, and the form that confirms it."""
    _require(ctx, Role.ADMIN)
    action = _action(ctx.request.query_params.get("action"))
    search = _search_of(str(ctx.request.query_params))
    dry = await ctx.api(
        "POST",
        "/api/v1/jobs/bulk",
        body={"action": action, "filter": search.api_filter(), "dry_run": True},
    )
    return await ctx.screen(
        "jobs_confirm.html",
        title=f"{_VERBS[action][0]} jobs?",
        active="Jobs",
        action=action,
        verb=_VERBS[action][0],
        count=dry["matched"],
        as_of=dry["as_of"],
        scope=scope_words(action, search, dry["matched"]),
        filters=search.url(),
    )


async def confirm_run(ctx: PageContext) -> Response:
    _require(ctx, Role.ADMIN)
    action = _action(ctx.form.get("action"))
    search = _search_of(ctx.form.get("filters", ""))
    bound = confirmed_bound(ctx.form)
    if not bound:
        # The confirmation always sends the bound it showed; without one the run would act
        # on a set nobody confirmed.
        raise ApiError(422, "invalid_input", "as_of: confirm the action on its page first")
    body = {"action": action, "filter": search.api_filter(), **bound}
    result = await ctx.api("POST", "/api/v1/jobs/bulk", body=body)
    done = {"done": action, "affected": result["affected"], "skipped": result["skipped"]}
    return ctx.redirect("/jobs?" + search.url(**done))


def _seconds_between(start: Any, end: Any) -> float | None:
    if not start or not end:
        return None
    return (
        dt.datetime.fromisoformat(str(end)) - dt.datetime.fromisoformat(str(start))
    ).total_seconds()


async def _job(ctx: PageContext) -> dict[str, Any]:
    job: dict[str, Any] = await ctx.api(
        "GET", "/api/v1/jobs/{job_id:int}", params={"job_id": ctx.path_params["job_id"]}
    )
    for x in job["executions"]:
        x["duration_seconds"] = _seconds_between(x["started_at"], x["finished_at"])
    completed = [x for x in job["executions"] if x["status"] == "completed"]
    job["result"] = completed[-1]["result"] if completed else None
    job["has_result"] = bool(completed)
    job["can_cancel"] = job["status"] in APPLIES_TO["cancel"]
    job["can_retry"] = job["status"] in APPLIES_TO["retry"]
    return job


async def job_page(ctx: PageContext) -> Response:
    job = await _job(ctx)
    link = await ctx.api("GET", "/api/v1/jobs/{job_id:int}/workflow", params={"job_id": job["id"]})
    return await ctx.screen(
        "job.html",
        title=f"Job {job['id']}",
        active="Jobs",
        live=True,
        flash=_flash(ctx),
        job=job,
        workflow=link["workflow"],
    )


async def job_fragment(ctx: PageContext) -> Response:
    return ctx.render("fragments/job.html", job=await _job(ctx))


async def _act_on_one(ctx: PageContext, action: str) -> Response:
    job_id = ctx.path_params["job_id"]
    await ctx.api("POST", f"/api/v1/jobs/{{job_id:int}}/{action}", params={"job_id": job_id})
    return ctx.redirect(f"/jobs/{job_id}?done={action}&affected=1")


async def cancel_one(ctx: PageContext) -> Response:
    return await _act_on_one(ctx, "cancel")


async def retry_one(ctx: PageContext) -> Response:
    return await _act_on_one(ctx, "retry")


PAGES = [
    Page("GET", "/jobs", jobs_page, "Jobs"),
    Page("GET", "/fragments/jobs", jobs_fragment, "Jobs (fragment)"),
    Page("POST", "/jobs/bulk", bulk_selected, "Cancel or retry selected jobs"),
    Page("GET", "/jobs/bulk/confirm", confirm_page, "Cancel or retry all matching: confirm"),
    Page("POST", "/jobs/bulk/confirm", confirm_run, "Cancel or retry all matching"),
    Page("GET", "/jobs/{job_id:int}", job_page, "Job"),
    Page("GET", "/fragments/jobs/{job_id:int}", job_fragment, "Job (fragment)"),
    Page("POST", "/jobs/{job_id:int}/cancel", cancel_one, "Cancel a job"),
    Page("POST", "/jobs/{job_id:int}/retry", retry_one, "Retry a job"),
]
