"""The dead letters screen: what failed for good, why, and putting it back in its queue.

Reads ``GET /api/v1/dead-letters`` (filters, a capped count, keyset pages) and
``GET /api/v1/dead-letters/{id}``; acts through ``POST .../{id}/replay`` (member+) and
``POST /api/v1/dead-letters/replay`` (admin+). Replaying all that match is two steps: the
confirmation page runs the API's dry run and states the exact scope and count; its Confirm
button posts the dry run's ``as_of`` back (:mod:`codity.web.dashboard.confirm`), so letters
that die after the operator read the number are not swept in, and the count it showed, so
those another replay took meanwhile are reported as skipped. Filters (queue, task, replayed
or not, a dead-at range) and the page cursor live in the URL; the list fragment is fetched
with the same query, and a replay redirects back to it with a message saying what happened.
A replay-all POST without the confirmed bound replays nothing: it goes to the confirmation
page.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import parse_qs, urlencode

from starlette.responses import Response

from codity.web.dashboard.confirm import confirmed_bound
from codity.web.dashboard.page import Page, PageContext

__all__ = ["PAGES"]

_PAGE_SIZE = 50
_REPLAYED = {"false": False, "true": True, "all": None}
"""The replayed filter in the URL; absent means "false": the letters still to look at."""


@dataclass(frozen=True, slots=True)
class _Filters:
    queue: str = ""
    task: str = ""
    replayed: str = "false"
    dead_after: str = ""
    dead_before: str = ""

    @classmethod
    def read(cls, values: Any) -> _Filters:
        """From a query string's or a form's fields; anything unknown is dropped."""

        def text(name: str) -> str:
            return str(values.get(name) or "").strip()

        replayed = text("replayed")
        return cls(
            queue=text("queue"),
            task=text("task"),
            replayed=replayed if replayed in _REPLAYED else "false",
            dead_after=text("dead_after"),
            dead_before=text("dead_before"),
        )

    def url_query(self, **extra: Any) -> str:
        """The filters as a query string (the default ``replayed=false`` left out)."""
        shown = {k: v for k, v in asdict(self).items() if v and (k, v) != ("replayed", "false")}
        return urlencode({**shown, **{k: v for k, v in extra.items() if v is not None}})

    def api_filters(self) -> dict[str, Any]:
        """What the API takes: empty fields left out, times without a zone read as UTC."""
        found: dict[str, Any] = {}
        for name in ("queue", "task"):
            if value := getattr(self, name):
                found[name] = value
        for name in ("dead_after", "dead_before"):
            if value := getattr(self, name):
                found[name] = _as_utc(value)
        return found

    def scope(self, count: int) -> str:
        """The scope in words: "Replay 12 dead letters in queue emails matching task:send"."""
        noun = "dead letter" if count == 1 else "dead letters"
        words = [f"Replay {count:,} {noun}"]
        words.append(f"in queue {self.queue}" if self.queue else "in every queue")
        if self.task:
            words.append(f"matching task:{self.task}")
        if self.dead_after:
            words.append(f"dead after {self.dead_after} UTC")
        if self.dead_before:
            words.append(f"dead before {self.dead_before} UTC")
        return " ".join(words)


def _as_utc(value: str) -> str:
    """A time typed without a zone (the datetime-local input) is UTC; anything unreadable is
    passed on as is for the API to refuse with its own message."""
    try:
        moment = dt.datetime.fromisoformat(value)
    except ValueError:
        return value
    return (moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)).isoformat()


def _flash(ctx: PageContext) -> str | None:
    """The message a POST left in the redirect's query: only known words and numbers, so a
    crafted link cannot make the page say anything else."""
    query = ctx.request.query_params

    def number(name: str) -> int | None:
        value = query.get(name, "")
        return int(value) if value.isdigit() and len(value) < 19 else None

    done = query.get("done")
    letter, job = number("letter"), number("job")
    if done == "replayed" and letter is not None and job is not None:
        return f"Replayed dead letter {letter} into job {job}."
    if done == "replayed_all":
        replayed, skipped = number("replayed") or 0, number("skipped") or 0
        noun = "dead letter" if replayed == 1 else "dead letters"
        message = f"Replayed {replayed:,} {noun}."
        if skipped:
            message += f" Skipped {skipped:,}: another replay took them first."
        return message
    return None


async def _listing(ctx: PageContext) -> dict[str, Any]:
    filters = _Filters.read(ctx.request.query_params)
    cursor = ctx.request.query_params.get("cursor") or None
    query: dict[str, Any] = {**filters.api_filters(), "limit": _PAGE_SIZE}
    if _REPLAYED[filters.replayed] is not None:
        query["replayed"] = _REPLAYED[filters.replayed]
    if cursor:
        query["cursor"] = cursor
    listed = await ctx.api("GET", "/api/v1/dead-letters", query=query)
    meta = listed["meta"]
    return {
        "letters": listed["data"],
        "count": meta["count"],
        "count_capped": meta["count_capped"],
        "filters": filters,
        "query": filters.url_query(cursor=cursor),
        "back": filters.url_query(),
        "first_page": cursor is None,
        "next_query": filters.url_query(cursor=meta["next_cursor"])
        if meta["next_cursor"]
        else None,
        "can_replay_all": filters.replayed == "false" and meta["count"] > 0,
    }


async def dead_letters_page(ctx: PageContext) -> Response:
    return await ctx.screen(
        "dead_letters.html",
        title="Dead letters",
        active="Dead letters",
        live=True,
        flash=_flash(ctx),
        **await _listing(ctx),
    )


async def dead_letters_fragment(ctx: PageContext) -> Response:
    return ctx.render("fragments/dead_letters.html", **await _listing(ctx))


async def _letter(ctx: PageContext) -> dict[str, Any]:
    letter: dict[str, Any] = await ctx.api(
        "GET",
        "/api/v1/dead-letters/{dead_letter_id:int}",
        params={"dead_letter_id": ctx.path_params["dead_letter_id"]},
    )
    return letter


async def dead_letter_page(ctx: PageContext) -> Response:
    letter = await _letter(ctx)
    return await ctx.screen(
        "dead_letter.html",
        title=f"Dead letter {letter['id']}",
        active="Dead letters",
        live=True,
        flash=_flash(ctx),
        letter=letter,
    )


async def dead_letter_fragment(ctx: PageContext) -> Response:
    return ctx.render("fragments/dead_letter.html", letter=await _letter(ctx))


async def replay_one(ctx: PageContext) -> Response:
    """Replay from the list (back to it, filters kept) or from the letter's own page."""
    letter_id = ctx.path_params["dead_letter_id"]
    replayed = await ctx.api(
        "POST",
        "/api/v1/dead-letters/{dead_letter_id:int}/replay",
        params={"dead_letter_id": letter_id},
    )
    done = {"done": "replayed", "letter": letter_id, "job": replayed["job_id"]}
    if "back" in ctx.form:
        back = _Filters.read({k: v[-1] for k, v in parse_qs(ctx.form["back"]).items()})
        return ctx.redirect(f"/dead-letters?{back.url_query(**done)}")
    return ctx.redirect(f"/dead-letters/{letter_id}?{urlencode(done)}")


async def confirm_page(ctx: PageContext) -> Response:
    """The dry run, stated in words: exact count and scope, and the Confirm button."""
    filters = _Filters.read(ctx.request.query_params)
    dry = await ctx.api(
        "POST",
        "/api/v1/dead-letters/replay",
        body={**filters.api_filters(), "dry_run": True},
    )
    return await ctx.screen(
        "dead_letters_confirm.html",
        title="Replay dead letters?",
        active="Dead letters",
        filters=filters,
        count=dry["count"],
        as_of=dry["as_of"],
        scope=filters.scope(dry["count"]),
        back=filters.url_query(),
    )


async def replay_all(ctx: PageContext) -> Response:
    filters = _Filters.read(ctx.form)
    bound = confirmed_bound(ctx.form)
    if not bound:
        # The confirmation always sends the bound it showed; without one the API would
        # replay a set nobody confirmed (its old "at most 100"). A dry run (so the API
        # still refuses whom it refuses), then to the confirmation page.
        await ctx.api(
            "POST", "/api/v1/dead-letters/replay", body={**filters.api_filters(), "dry_run": True}
        )
        return ctx.redirect(f"/dead-letters/confirm?{filters.url_query()}")
    body: dict[str, Any] = {**filters.api_filters(), **bound}
    if ctx.form.get("confirmed"):
        body["confirmed"] = ctx.form["confirmed"]
    result = await ctx.api("POST", "/api/v1/dead-letters/replay", body=body)
    done = {"done": "replayed_all", "replayed": result["affected"], "skipped": result["skipped"]}
    return ctx.redirect(f"/dead-letters?{filters.url_query(**done)}")


PAGES = [
    Page("GET", "/dead-letters", dead_letters_page, "Dead letters"),
    Page("GET", "/fragments/dead-letters", dead_letters_fragment, "Dead letters (fragment)"),
    Page("GET", "/dead-letters/confirm", confirm_page, "Replay dead letters: confirm"),
    Page("POST", "/dead-letters/replay-all", replay_all, "Replay dead letters"),
    Page("GET", "/dead-letters/{dead_letter_id:int}", dead_letter_page, "Dead letter"),
    Page(
        "GET",
        "/fragments/dead-letters/{dead_letter_id:int}",
        dead_letter_fragment,
        "Dead letter (fragment)",
    ),
    Page("POST", "/dead-letters/{dead_letter_id:int}/replay", replay_one, "Replay a dead letter"),
]
