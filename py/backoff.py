"""How long to wait before trying the database again, and noticing when it is back.

One helper for every retry loop of the worker, its reporter and the scheduler, instead of
one hand-rolled loop each: capped exponential delays with jitter (half to all of the
current step, so a fleet of workers that lost the same server does not reconnect in step),
a low cap (2 s by default: after an outage, pickup lags by at most that), and a cheap probe
while waiting — a TCP connect to the server's port every 100 ms — that ends the wait as
soon as a server that was refusing connections accepts one again. A server that accepts
connections and still fails (a backend killed, a restart in recovery) gets the plain delay,
so the probe never turns an error into a tight loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import urlsplit

__all__ = ["Backoff", "server_address"]

_PROBE_EVERY_S = 0.1
_PROBE_TIMEOUT_S = 0.2


class _Waitable(Protocol):
    def wait(self, timeout: float) -> bool: ...


def server_address(url: str) -> tuple[str, int] | None:
    """The TCP host and port of a postgresql:// URL, or None (a Unix socket, no host)."""
    parts = urlsplit(url)
    host = parts.hostname
    if not host or host.startswith("/"):
        return None
    try:
        port = parts.port or 5432
    except ValueError:
        return None
    return host, port


def _accepts(address: tuple[str, int]) -> bool:
    try:
        with socket.create_connection(address, timeout=_PROBE_TIMEOUT_S):
            return True
    except OSError:
        return False


@dataclass
class Backoff:
    first_s: float = 0.1
    cap_s: float = 2.0
    factor: float = 2.0
    _step: float = field(init=False, default=0.0)

    def __post_init__(self) -> None:
        self._step = self.first_s

    def reset(self) -> None:
        """After a success: the next failure waits the first step again."""
        self._step = self.first_s

    def next_delay(self) -> float:
        delay = random.uniform(self._step / 2, self._step)
        self._step = min(self._step * self.factor, self.cap_s)
        return delay

    async def wait(
        self, *, server: tuple[str, int] | None = None, stop: asyncio.Event | None = None
    ) -> None:
        """Sleep the next delay; end early when ``stop`` is set, or when ``server`` starts
        accepting connections again after refusing them."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.next_delay()
        refused = False
        while (left := deadline - loop.time()) > 0 and not (stop is not None and stop.is_set()):
            if server is not None:
                up = await asyncio.to_thread(_accepts, server)
                if up and refused:
                    return  # it was down and is back: try at once
                refused = refused or not up
            nap = min(_PROBE_EVERY_S, left)
            if stop is None:
                await asyncio.sleep(nap)
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), nap)

    def wait_blocking(self, stop: _Waitable, *, server: tuple[str, int] | None = None) -> None:
        """The same for a thread: ``stop.wait(timeout)`` returns True once it is set."""
        remaining = self.next_delay()
        refused = False
        while remaining > 0:
            if server is not None:
                up = _accepts(server)
                if up and refused:
                    return
                refused = refused or not up
            nap = min(_PROBE_EVERY_S, remaining)
            if stop.wait(nap):
                return
            remaining -= nap
