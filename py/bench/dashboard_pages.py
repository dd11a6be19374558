"""Each dashboard page's server time, as the web process reports it (``Server-Timing``).

Requests go one at a time over one keep-alive connection, signed in by cookie; the figure
is the app's own time to the first byte (for a rendered page, all of its work: the API
calls it makes, their SQL, the template), so the client's speed and the loopback are not in
it. A page that does not answer 200 fails the run: a redirect to the sign-in page or an
error page would time the wrong thing.
"""

from __future__ import annotations

import http.client
import re
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = ["PageFigure", "PageTimingError", "time_pages"]

_DURATION = re.compile(r"app;dur=([0-9.]+)")


class PageTimingError(RuntimeError):
    pass


@dataclass(frozen=True)
class PageFigure:
    path: str
    samples: int
    p50_ms: float
    p95_ms: float
    max_ms: float
    bytes: int


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def time_pages(
    base_url: str, cookie: str, paths: Sequence[str], *, samples: int = 40, warmup: int = 3
) -> list[PageFigure]:
    parts = urlsplit(base_url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)
    figures = []
    try:
        for path in paths:
            times: list[float] = []
            size = 0
            for i in range(warmup + samples):
                conn.request("GET", path, headers={"Cookie": cookie})
                response = conn.getresponse()
                body = response.read()
                if response.status != 200:
                    raise PageTimingError(f"GET {path} answered {response.status}: {body[:200]!r}")
                found = _DURATION.search(response.getheader("server-timing") or "")
                if found is None:
                    raise PageTimingError(f"GET {path} carried no Server-Timing header")
                if i >= warmup:
                    times.append(float(found.group(1)))
                    size = len(body)
            figures.append(
                PageFigure(
                    path=path,
                    samples=samples,
                    p50_ms=_percentile(times, 0.50),
                    p95_ms=_percentile(times, 0.95),
                    max_ms=max(times),
                    bytes=size,
                )
            )
    finally:
        conn.close()
    return figures
