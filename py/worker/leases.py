"""The worker's own view of its leases, on its monotonic clock.

A lease runs on the database's clock: a claim or a heartbeat answered leases each of its
jobs for the queue's ``lease_seconds`` from the call's moment in the database, which comes
after the worker sent it. So, on the worker's clock, a job's lease lasts at least until
the moment the last answered call for it was *sent*, plus ``lease_seconds``. A worker cut
off from the database gets no answer that could tell it a lease ran out, and the reaper
may hand the job to another worker right after: so the worker stops the handler itself a
margin before that moment, and starts no held job whose moment has passed (issue 25;
docs/DESIGN_DECISIONS.md 64).

The margin is a fifth of the lease, at most 2 s: 0.6 s of a 3 s lease, 2 s of the default
30 s. It covers a handler's last steps after it was told, an event loop late to notice,
and clocks that run at slightly different rates; the database's and the worker's clocks
need not agree on the time, only on how long a second is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

__all__ = ["Leases", "margin"]

_MAX_MARGIN_S = 2.0


def margin(lease_s: float) -> float:
    """How long before a lease may run out the worker stops the job's handler."""
    return min(_MAX_MARGIN_S, lease_s / 5)


class Leases:
    """Loop time by which each held job must have stopped, by job id."""

    def __init__(self) -> None:
        self._lease_s: dict[int, float] = {}  # by queue id
        self._stop_by: dict[int, float] = {}  # by job id

    def lease_seconds(self, by_queue: Mapping[int, float]) -> None:
        """The queues' lease_seconds, as codity.worker_queues gives them."""
        self._lease_s = dict(by_queue)

    def shortest(self) -> float | None:
        """The shortest lease of the queues served; None before they are known."""
        return min(self._lease_s.values(), default=None)

    def granted(self, jobs: Iterable[tuple[int, int]], sent_at: float) -> None:
        """A claim or heartbeat sent at loop time ``sent_at`` was answered: each of its
        ``(job id, queue id)`` holds a lease until at least ``sent_at`` + the queue's lease."""
        for job_id, queue_id in jobs:
            lease_s = self._lease_s.get(queue_id)
            if lease_s is None:
                continue
            stop_by = sent_at + lease_s - margin(lease_s)
            if stop_by > self._stop_by.get(job_id, float("-inf")):
                self._stop_by[job_id] = stop_by

    def stop_by(self, job_id: int) -> float:
        """Loop time by which the job must have stopped (infinite when unknown)."""
        return self._stop_by.get(job_id, float("inf"))

    def forget(self, job_id: int) -> None:
        self._stop_by.pop(job_id, None)

    def next_stop(self) -> float | None:
        """The earliest loop time by which a held job must stop; None when nothing is held."""
        return min(self._stop_by.values(), default=None)
