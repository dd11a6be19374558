"""Live pages: NOTIFY → one listener per web process → debounced server-sent events.

The engine notifies ``codity_v1`` with a queue id whenever a queue has news (enqueue,
promote, reap, release, ...). Each web process holds **one** LISTEN connection, however
many pages are open; it gathers the ids that arrive within ``DEBOUNCE_S`` (250 ms) and then
tells every open page whose project owns one of them, with one ``changed`` event. Pages
re-render their fragments through the API on that event (static/dashboard.js), so the
stream carries no data at all — only "look again".

A page's set of queue ids comes from the API (``GET /api/v1/queues``, as its user) and is
read again every ``REFRESH_S``, so a queue created meanwhile is followed too. The listener
reconnects with backoff and tells every page to look again when it is back (notifications
sent while it was away are gone). A slow page never holds the others up: its queue is
small and an overflow only means it already has an event waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field

import psycopg

from codity.backoff import Backoff, server_address
from codity.db.conninfo import conninfo

__all__ = ["DEBOUNCE_S", "LiveBroker", "Subscription"]

log = logging.getLogger(__name__)

CHANNEL = "codity_v1"
DEBOUNCE_S = 0.25
REFRESH_S = 30.0
EVERYTHING = -1  # a pseudo queue id: "look again", sent after a reconnect


@dataclass(eq=False)
class Subscription:
    queue_ids: set[int]
    events: asyncio.Queue[None] = field(default_factory=lambda: asyncio.Queue(maxsize=1))

    def wants(self, ids: set[int]) -> bool:
        return EVERYTHING in ids or not self.queue_ids.isdisjoint(ids)

    def notify(self) -> None:
        with contextlib.suppress(asyncio.QueueFull):  # one waiting event is enough
            self.events.put_nowait(None)


class LiveBroker:
    def __init__(self, url: str) -> None:
        self.url = url
        self.subscriptions: set[Subscription] = set()
        self.delivered = 0
        self._pending: set[int] = set()
        self._flush: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None

    def subscribe(self, queue_ids: set[int]) -> Subscription:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._listen(), name="codity-live-listener")
        subscription = Subscription(queue_ids)
        self.subscriptions.add(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        self.subscriptions.discard(subscription)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def _arrived(self, queue_id: int) -> None:
        self._pending.add(queue_id)
        if self._flush is None:
            self._flush = asyncio.get_running_loop().call_later(DEBOUNCE_S, self._deliver)

    def _deliver(self) -> None:
        ids, self._pending, self._flush = self._pending, set(), None
        for subscription in list(self.subscriptions):
            if subscription.wants(ids):
                subscription.notify()
                self.delivered += 1

    async def _listen(self) -> None:
        backoff = Backoff()
        info = conninfo(self.url, application_name="codity-web-live")
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(info, autocommit=True) as conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    backoff.reset()
                    self._arrived(EVERYTHING)
                    async for notify in conn.notifies():
                        if notify.payload.isdigit():
                            self._arrived(int(notify.payload))
            except psycopg.OperationalError as exc:
                log.warning("live listener lost its connection (%s)", type(exc).__name__)
                await backoff.wait(server=server_address(self.url))
