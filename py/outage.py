"""One warning when the database stops answering, one line when it answers again.

While the primary is away every loop of a process retries, several times a second: a
warning per retry buried the one line an operator needs under hundreds (HA.md §7: log once
per outage). Every loop of a process reports to one :class:`Outage`: the first failure is
logged as a warning with what failed and why, the retries after it at DEBUG, and the first
success after them once, with how long the database was away and how many calls failed.
"""

from __future__ import annotations

import logging
import threading
import time

__all__ = ["Outage"]


class Outage:
    def __init__(self, log: logging.Logger) -> None:
        self._log = log
        self._lock = threading.Lock()  # the scheduler's thread and the worker's loop alike
        self._since: float | None = None
        self._failures = 0

    @property
    def ongoing(self) -> bool:
        return self._since is not None

    def failed(self, doing: str, exc: BaseException) -> None:
        """A call failed on a lost or unusable connection (TRANSIENT); it will be retried."""
        reason = f"{type(exc).__name__}: {str(exc).strip() or 'no message'}"
        with self._lock:
            self._failures += 1
            first = self._since is None
            if first:
                self._since = time.monotonic()
        if first:
            self._log.warning(
                "%s failed (%s); retrying until the database answers", doing, reason[:300]
            )
        else:
            self._log.debug("%s failed again (%s)", doing, reason[:300])

    def answered(self) -> None:
        """A call succeeded: if the database was away, say for how long, once."""
        if self._since is None:  # the common case, without the lock
            return
        with self._lock:
            if self._since is None:
                return
            away, failures = time.monotonic() - self._since, self._failures
            self._since, self._failures = None, 0
        self._log.warning(
            "the database answers again after %.1fs (%d call(s) failed meanwhile)",
            away,
            failures,
        )
