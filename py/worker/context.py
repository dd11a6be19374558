"""What a handler knows about the job it runs."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["JobContext", "JobLogger"]


class JobLogger(logging.LoggerAdapter[logging.Logger]):
    """Prefixes records with the job; it is never given the payload, so it cannot log it."""

    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        extra = self.extra or {}
        return f"[job {extra.get('job_id')} attempt {extra.get('attempt')}] {msg}", kwargs


@dataclass
class JobContext:
    job_id: int
    attempt: int
    fence: int
    queue: str
    queue_id: int
    task: str
    max_attempts: int
    waited_ms: int = 0
    """How long the job waited in the worker for a free slot after its claim's answer, in
    milliseconds (a prefetched job); reported with its outcome, so the attempt's started_at
    is when its handler began, not the claim's time."""
    read_parents: Callable[[JobContext], Awaitable[list[dict[str, Any]]]] | None = field(
        default=None, repr=False, compare=False
    )
    """Set by the worker: how parent_results reads codity.dep_results."""

    async def parent_results(self) -> dict[str, dict[str, Any]]:
        """For a node of a workflow (codity.enqueue_workflow): the nodes it runs after, by
        key, each with its ``job_id``, ``status``, ``outcome`` (completed or skipped;
        dead_letter or cancelled through an edge that does not cancel) and the ``result``
        its completion recorded. A batch's callback gets its members, which have no key, by
        job id (as a string). One call to codity.dep_results, as the job's holder (its
        fence); empty for a plain job. For async handlers; a sync handler calls
        codity.dep_results itself."""
        if self.read_parents is None:
            raise RuntimeError("parent_results is read through the worker running the job")
        rows = await self.read_parents(self)
        return {row.pop("node_key") or str(row["job_id"]): row for row in rows}

    @functools.cached_property
    def cancelled(self) -> asyncio.Event:
        """Set when the job was cancelled by an operator or its lease was lost: stop work.
        Made on first use, like the logger: an Event for every claimed job was 5 % of the
        worker's samples in a drain (py-spy), and most jobs are never cancelled."""
        return asyncio.Event()

    @functools.cached_property
    def logger(self) -> JobLogger:
        """``codity.job.<task>``, each record prefixed with the job and attempt. Made on first
        use: most jobs never log, and making one for each claimed job took 6 % of the
        worker's samples in a drain (py-spy)."""
        return JobLogger(
            logging.getLogger(f"codity.job.{self.task}"),
            {"job_id": self.job_id, "attempt": self.attempt},
        )

    @property
    def is_cancelled(self) -> bool:
        # Without making the Event: none exists until someone sets or awaits it.
        event = self.__dict__.get("cancelled")
        return event is not None and event.is_set()
