"""The benchmark's own handler: it reports when it started, on the machine's clock.

``codity bench`` measures pickup latency from the enqueue's COMMIT (``time.time()`` in the
bench process right after the call returns) to the first line of this handler
(``time.time()`` in the worker process). Both read the same system clock, and the start
time comes back through ``codity.complete_many`` as the execution's result, so no side
channel is needed. Run with ``codity worker --app codity.bench.tasks:registry``.

A payload ``{"work_ms": n}`` makes the handler take that long after it starts (an
``asyncio.sleep``: a job that waits on something, as most do), for benchmarks where a
worker's slots, not the database, are what jobs wait for (``codity bench --fairness``).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from codity.worker.context import JobContext
from codity.worker.registry import Registry

__all__ = ["PICKUP_TASK", "registry"]

PICKUP_TASK = "bench.pickup"

registry = Registry()


@registry.task(PICKUP_TASK)
async def pickup(payload: Any, ctx: JobContext) -> dict[str, float]:
    """Return the wall-clock time at which the handler began."""
    started = time.time()
    if isinstance(payload, dict) and (work_ms := payload.get("work_ms")):
        await asyncio.sleep(float(work_ms) / 1000)
    return {"started": started}
