"""Live pages under load: N open event streams on one web process, one NOTIFY, how fast each
page hears of it.

Each page is a raw HTTP/1.1 connection to ``/events`` with a session cookie (what a
browser's EventSource holds open), so the measure has no client library in it. A round
sends one ``NOTIFY codity_v1`` with a queue id of the pages' project and times, per page,
from just before the NOTIFY is sent to the moment its ``changed`` event arrives: the
listener's debounce (250 ms) is part of what is measured. The web process must hold one
listener connection however many pages are open; that count is read from
pg_stat_activity while they are.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import psycopg

__all__ = ["LiveFigures", "measure_live_pages"]

_EVENT = b"event: changed"


@dataclass(frozen=True)
class LiveFigures:
    pages: int
    rounds: int
    delivered: int
    missed: int
    listeners: int
    p50_ms: float
    p99_ms: float
    max_ms: float


class _Page:
    def __init__(self) -> None:
        self.heard: asyncio.Queue[float] = asyncio.Queue()
        self.ready = asyncio.Event()

    async def follow(self, base_url: str, cookie: str) -> None:
        parts = urlsplit(base_url)
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
        request = (
            f"GET /events HTTP/1.1\r\nHost: {parts.netloc}\r\nAccept: text/event-stream\r\n"
            f"Cookie: {cookie}\r\nCache-Control: no-cache\r\n\r\n"
        )
        writer.write(request.encode())
        await writer.drain()
        seen = b""
        try:
            while True:
                chunk = await reader.read(4096)
                if not chunk:
                    return
                now = time.monotonic()
                seen = (seen + chunk)[-4096:]
                if b"event: ready" in seen:
                    self.ready.set()
                while _EVENT in seen:
                    self.heard.put_nowait(now)
                    seen = seen[seen.index(_EVENT) + len(_EVENT) :]
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


async def _measure(
    base_url: str, cookie: str, db_url: str, queue_id: int, pages: int, rounds: int
) -> LiveFigures:
    followers = [_Page() for _ in range(pages)]
    tasks = [asyncio.create_task(p.follow(base_url, cookie)) for p in followers]
    try:
        await asyncio.wait_for(asyncio.gather(*(p.ready.wait() for p in followers)), 60)
        await asyncio.sleep(1.0)  # the reconnect "look again" of a fresh listener
        for p in followers:
            while not p.heard.empty():
                p.heard.get_nowait()
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
            cur = await conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'codity-web-live'"
            )
            listeners = int((await cur.fetchone() or (0,))[0])
            latencies: list[float] = []
            missed = 0
            for _ in range(rounds):
                sent = time.monotonic()
                await conn.execute("SELECT pg_notify('codity_v1', %s)", [str(queue_id)])
                for p in followers:
                    try:
                        heard = await asyncio.wait_for(p.heard.get(), 5.0)
                        latencies.append((heard - sent) * 1000)
                    except TimeoutError:
                        missed += 1
                await asyncio.sleep(0.5)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return LiveFigures(
        pages=pages,
        rounds=rounds,
        delivered=len(latencies),
        missed=missed,
        listeners=listeners,
        p50_ms=_percentile(latencies, 0.50) if latencies else float("nan"),
        p99_ms=_percentile(latencies, 0.99) if latencies else float("nan"),
        max_ms=max(latencies) if latencies else float("nan"),
    )


def measure_live_pages(
    base_url: str, cookie: str, db_url: str, queue_id: int, *, pages: int = 200, rounds: int = 20
) -> LiveFigures:
    """``pages`` event streams on ``base_url``; ``rounds`` NOTIFYs about ``queue_id``."""
    return asyncio.run(_measure(base_url, cookie, db_url, queue_id, pages, rounds))
