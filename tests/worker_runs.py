"""Run one in-process worker until a condition holds: the loop the fairness tests share."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from codity.worker import Registry, Worker, WorkerConfig

__all__ = ["run_worker_until"]


def run_worker_until(
    db_url: str,
    registry: Registry,
    config: WorkerConfig,
    until: Callable[[], bool],
    *,
    within: float = 60,
) -> None:
    """Start a worker, call ``until`` every 10 ms until it is true, then stop the worker
    (drained, deregistered). Fails when ``within`` seconds pass first or the worker ends."""

    async def scenario() -> None:
        stop = asyncio.Event()
        worker = asyncio.create_task(Worker(db_url, registry, config).run(stop))
        deadline = time.monotonic() + within
        try:
            while not until():
                assert time.monotonic() < deadline, "timed out"
                assert not worker.done(), worker.exception() if worker.done() else None
                await asyncio.sleep(0.01)
        finally:
            stop.set()
            await asyncio.wait_for(worker, 30)

    asyncio.run(scenario())
