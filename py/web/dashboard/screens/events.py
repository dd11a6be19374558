"""``/events``: the live stream of a signed-in page (see codity.web.dashboard.live).

The page's queues are the ones ``GET /api/v1/queues`` shows its user, so an event about
another project's queue never reaches it; they are read again every few seconds of
activity so a new queue is followed too.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from sse_starlette.sse import EventSourceResponse
from starlette.responses import Response

from codity.web.dashboard.live import REFRESH_S, LiveBroker
from codity.web.dashboard.page import Page, PageContext

__all__ = ["PAGES"]


async def _queue_ids(ctx: PageContext) -> set[int]:
    return {int(q["id"]) for q in await ctx.api("GET", "/api/v1/queues")}


async def events(ctx: PageContext) -> Response:
    broker: LiveBroker = ctx.request.app.state.live
    subscription = broker.subscribe(await _queue_ids(ctx))

    async def changes() -> AsyncIterator[dict[str, str]]:
        loop = asyncio.get_running_loop()
        refreshed = loop.time()
        try:
            yield {"event": "ready", "data": ""}
            while True:
                try:
                    await asyncio.wait_for(subscription.events.get(), REFRESH_S)
                    yield {"event": "changed", "data": ""}
                except TimeoutError:
                    pass
                if loop.time() - refreshed >= REFRESH_S:
                    subscription.queue_ids = await _queue_ids(ctx)
                    refreshed = loop.time()
        finally:
            broker.unsubscribe(subscription)

    return EventSourceResponse(changes(), ping=15, headers={"Cache-Control": "no-store"})


PAGES = [Page("GET", "/events", events, "Live events (server-sent)")]
