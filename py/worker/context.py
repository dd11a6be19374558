"""What a handler knows about the job it runs."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import MutableMapping
from dataclasses import dataclass
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
