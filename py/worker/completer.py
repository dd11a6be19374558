"""Report successful jobs in batches: one ``codity.complete_many`` per flush.

A flush starts as soon as a job finishes; completions that arrive while it is in flight
wait for the next one. At low load every job is reported alone and at once; at high load
a flush carries everything that finished during the previous round trip (River's batch
completer, without a timer).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from psycopg.types.json import Jsonb

from codity.worker.context import JobContext

__all__ = ["Completer"]

log = logging.getLogger(__name__)

MAX_BATCH = 500
# Only refusals and repeats come back: an applied completion needs nothing more from the
# database, and at full speed a flush carries hundreds of them. A batch resent after its
# connection dropped mid-call answers 'already_applied' for what had landed.
_COMPLETE_MANY = (
    "SELECT c.job_id, c.accepted, c.detail"
    " FROM codity.complete_many(%s::bigint[], %s::integer[], %s::jsonb[]) AS c"
    " WHERE c.outcome <> 'applied'"
)
Call = Callable[[str, list[Any]], Awaitable[list[dict[str, Any]]]]


class Completer:
    def __init__(
        self, call: Call, lock: asyncio.Lock, transient: tuple[type[BaseException], ...]
    ) -> None:
        self._call = call
        self._lock = lock
        self._transient = transient
        self._buffer: list[tuple[JobContext, Jsonb | None]] = []
        self._in_flight: list[tuple[JobContext, Jsonb | None]] = []
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()

    def add(self, ctx: JobContext, result: Jsonb | None) -> None:
        self._buffer.append((ctx, result))
        self._idle.clear()
        self._wake.set()

    def pending(self) -> list[JobContext]:
        """Jobs finished but not yet reported: their leases must still be heartbeated."""
        return [ctx for ctx, _ in self._in_flight + self._buffer]

    async def wait_idle(self, timeout: float) -> bool:
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._buffer:
                self._in_flight = self._buffer[:MAX_BATCH]
                del self._buffer[:MAX_BATCH]
                await self._flush(self._in_flight)
                self._in_flight = []
            self._idle.set()

    async def _flush(self, batch: list[tuple[JobContext, Jsonb | None]]) -> None:
        params: list[Any] = [
            [ctx.job_id for ctx, _ in batch],
            [ctx.fence for ctx, _ in batch],
            [result for _, result in batch],
        ]
        backoff = 0.2
        while True:
            try:
                async with self._lock:
                    rows = await self._call(_COMPLETE_MANY, params)
                break
            except self._transient as exc:
                # The batch may have committed before the connection dropped: resending it
                # is safe (what landed answers 'already_applied').
                log.warning(
                    "reporting %d completion(s) failed (%s); retrying",
                    len(batch),
                    type(exc).__name__,
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
        repeats = [row["job_id"] for row in rows if row["accepted"]]
        if repeats:
            log.info("%d completion(s) had landed before the connection dropped", len(repeats))
        for row in rows:
            if not row["accepted"]:
                log.info("completion of job %s refused: %s", row["job_id"], row["detail"])
