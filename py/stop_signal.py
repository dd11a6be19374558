"""A stop request that a signal handler can set safely.

``threading.Event.set()`` takes the event's lock. Called from a signal handler while the
main thread sits inside ``Event.wait()`` holding that same (non-reentrant) lock — a window
of a few instructions every time the wait wakes — it deadlocks the process for good: it
never stops. This was seen once in CI as ``codity up`` ignoring Ctrl-C. Here the handler
only sets a flag and writes a byte to a non-blocking pipe (both async-signal-safe, no
lock); waiting is a ``select`` on the pipe, so a waiter wakes at once.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal

__all__ = ["StopSignal"]


class StopSignal:
    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        self._set = False

    def set(self) -> None:
        self._set = True
        # A full pipe means the waiter has plenty to wake on already.
        with contextlib.suppress(BlockingIOError):
            os.write(self._write, b"!")

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float) -> bool:
        """Like ``Event.wait``: True once set, else False after ``timeout`` seconds."""
        if not self._set:
            select.select([self._read], [], [], max(0.0, timeout))
        return self._set

    def install(self, *signums: int) -> StopSignal:
        """Set this on each of ``signums`` (SIGINT and SIGTERM by default)."""

        def handle(signum: int, _frame: object) -> None:
            self.set()

        for signum in signums or (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, handle)
        return self
