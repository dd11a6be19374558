"""Handlers by task name, and the way Python code enqueues them.

::

    registry = Registry()

    @registry.task("emails.send")
    async def send_email(payload: dict[str, Any], ctx: JobContext) -> None: ...

    send_email.enqueue(conn, {"to": "a@example.com"}, queue="emails")

A handler may be ``def`` or ``async def``; sync handlers run in a thread so they never
block the worker's event loop. Enqueueing goes through ``codity.enqueue`` (never SQL of
our own), inside the caller's transaction when the connection has one open.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from codity.worker.context import JobContext

__all__ = ["Handler", "NonRetryable", "Registry", "Task"]

Handler = Callable[[Any, JobContext], Any] | Callable[[Any, JobContext], Awaitable[Any]]


class NonRetryable(Exception):
    """Raise (or subclass) in a handler to dead-letter the job at once, without retries."""


@dataclass(frozen=True)
class Task:
    name: str
    handler: Handler
    queue: str | None = None
    non_retryable: tuple[type[BaseException], ...] = (NonRetryable,)

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.handler)

    def enqueue(
        self,
        conn: psycopg.Connection[Any],
        payload: Any = None,
        *,
        queue: str | None = None,
        run_at: datetime | None = None,
        priority: int = 0,
        idempotency_key: str | None = None,
        max_attempts: int | None = None,
        project_id: int | None = None,
    ) -> int:
        """Enqueue this task; returns the job id (an existing job's for a known idempotency key)."""
        target = queue or self.queue
        if target is None:
            raise ValueError(f"task {self.name!r} has no default queue; pass queue=")
        row = conn.execute(
            "SELECT job_id FROM codity.enqueue(%s, %s, %s, %s, %s, %s, %s, %s)",
            [
                target,
                self.name,
                Jsonb(payload if payload is not None else {}),
                run_at,
                priority,
                idempotency_key,
                max_attempts,
                project_id,
            ],
        ).fetchone()
        assert row is not None
        return int(row[0])


@dataclass
class Registry:
    """Task name -> handler."""

    tasks: dict[str, Task] = field(default_factory=dict)

    def task(
        self,
        name: str,
        *,
        queue: str | None = None,
        non_retryable: tuple[type[BaseException], ...] = (),
    ) -> Callable[[Handler], Task]:
        """Register the decorated function as the handler of ``name``."""

        def register(handler: Handler) -> Task:
            if name in self.tasks:
                raise ValueError(f"task {name!r} is already registered")
            task = Task(name, handler, queue, (NonRetryable, *non_retryable))
            self.tasks[name] = task
            return task

        return register

    def get(self, name: str) -> Task | None:
        return self.tasks.get(name)

    def __iter__(self) -> Iterator[Task]:
        return iter(self.tasks.values())

    def __len__(self) -> int:
        return len(self.tasks)
