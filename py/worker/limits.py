"""A limited queue's next claim: when to try again after a claim came back short.

A queue with ``max_running`` or a rate limit (migration 0023) hands out fewer jobs than
asked whenever the limit is reached; nothing notifies a worker when room comes back (a
completion elsewhere, a new rate window), and the safety-net poll is seconds away. So
after a short claim on a limited queue the worker tries again soon: at the start of the
next rate window (on this machine's clock, which the database's may lead or trail by a
little: a claim that comes early gets nothing and tries again shortly), or, for a
concurrency limit, after about a tenth of a second. A queue without limits is never
retried early: there a short claim means the queue is empty, and NOTIFY says when it is
not.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

__all__ = ["CONCURRENCY_RETRY_S", "Limits"]

CONCURRENCY_RETRY_S = 0.1
_EARLY_S = 0.01
"""The least wait: a window boundary this machine thinks has passed may not have, yet."""


@dataclass(frozen=True, slots=True)
class Limits:
    max_running: int | None = None
    rate_limit: int | None = None
    rate_period_s: int | None = None

    @classmethod
    def of(cls, row: dict[str, Any]) -> Limits:
        """From a row of ``codity.worker_queues``."""
        return cls(row["max_running"], row["rate_limit"], row["rate_period_seconds"])

    @property
    def limited(self) -> bool:
        return self.max_running is not None or self.rate_limit is not None

    def retry_after(self, now_s: float) -> float | None:
        """Seconds until a claim that came back short is worth trying again; None when the
        queue has no limit (it was empty). ``now_s``: the wall clock, seconds since the epoch."""
        waits = []
        if self.rate_period_s is not None:
            period = self.rate_period_s
            boundary = (math.floor(now_s / period) + 1) * period
            waits.append(max(_EARLY_S, boundary - now_s) + random.uniform(0, _EARLY_S))
        if self.max_running is not None:
            waits.append(CONCURRENCY_RETRY_S * random.uniform(0.5, 1.5))
        return min(waits) if waits else None
