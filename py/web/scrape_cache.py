"""The metrics scrape, kept for a few seconds per project.

An exact scrape reads counts through partial indexes: about 100 ms at a million queued
jobs. Prometheus scrapes every few seconds, often from several replicas, and one viewer key
could ask in a loop; so a web process answers a project's scrape from what it read less
than ``ttl_s`` ago, and scrapes arriving together while it reads wait for that one read
(one query set per project per ``ttl_s`` per process, whatever the number of scrapers).
The body is kept only after the request passed its guard and role check, and is handed
out only to a later request that passed them for the same project.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

__all__ = ["ScrapeCache"]


@dataclass
class ScrapeCache:
    ttl_s: float
    """0: every scrape reads the database."""
    _bodies: dict[int, tuple[float, bytes]] = field(default_factory=dict)
    _locks: dict[int, asyncio.Lock] = field(default_factory=dict)

    async def get(self, project_id: int, read: Callable[[], Awaitable[bytes]]) -> tuple[bytes, int]:
        """The project's scrape and its age in whole seconds: kept, or ``read`` now."""
        if self.ttl_s <= 0:
            return await read(), 0
        lock = self._locks.setdefault(project_id, asyncio.Lock())
        async with lock:
            kept = self._bodies.get(project_id)
            now = time.monotonic()
            if kept is not None and now - kept[0] < self.ttl_s:
                return kept[1], int(now - kept[0])
            body = await read()
            self._bodies[project_id] = (time.monotonic(), body)
            return body, 0
