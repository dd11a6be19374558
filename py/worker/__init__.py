"""Workers: handlers registered by task name, run by a LISTEN/NOTIFY-driven runtime."""

from codity.worker.context import JobContext
from codity.worker.registry import NonRetryable, Registry, Task
from codity.worker.runtime import Worker, WorkerConfig

__all__ = ["JobContext", "NonRetryable", "Registry", "Task", "Worker", "WorkerConfig"]
