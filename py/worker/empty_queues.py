"""The queues a worker found empty, left alone until something may have arrived in them.

A worker claims its queues one call each. Without this, a busy worker serving several
queues asks every queue listed before the one with work at each turn of its claim loop,
and once the first queues have drained, most of its claims come back empty: in the
8-queue drain of ``codity bench --citus``, 369 of 481 claims, three for every claim that
found jobs. An empty claim is not free: about 0.2 ms of a plain server's time, and on a
Citus cluster about 1 ms (the call is sent to the queue's node, which plans each of the
body's statements through Citus; DESIGN_DECISIONS 62).

So a claim that comes back with nothing marks its queue empty, and the claim loop skips
it until one of these says work may be there:

- a notification for the queue (``codity_v1``, payload its id: every write that makes a
  job claimable sends one, DATABASE.md rule 10);
- the listener (re)connecting, or a notification it cannot read: every mark is dropped,
  since notifications sent meanwhile are lost;
- the safety-net poll: a claim loop that waited its whole poll interval drops every mark,
  and a mark older than the interval is ignored (a busy worker seldom waits that long).

A lost notification therefore delays a job in a queue marked empty by up to the poll
interval while the worker is busy elsewhere, as it always did for an idle worker.

A claim made without suspects (a busy worker does not take a job with a crash on record)
marks the queue empty for such claims only: a queue that holds only a suspect is claimed
again as soon as the worker is idle. Queues with a limit (``max_running``, a rate) are
never marked: their short claims are retried on the limit's own schedule
(codity.worker.limits), since nothing notifies when room comes back.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["EmptyQueues"]


class EmptyQueues:
    def __init__(self, ttl_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        """How long a mark holds at most; 0 turns marking off (a worker not listening)."""
        self._clock = clock
        self._marks: dict[int, tuple[float, bool]] = {}  # queue id: (when, claimed suspects)
        self._heard = 0  # notifications heard so far
        self._heard_for: dict[int, int] = {}  # queue id: self._heard after its last one
        self._heard_for_all = 0
        self.skipped = 0
        """Claims not sent because their queue was marked empty (for logs and tests)."""

    def before_claim(self) -> int:
        """To pass to :meth:`mark`: what had been heard when the claim was sent."""
        return self._heard

    def mark(self, queue_id: int, *, suspects: bool, since: int) -> None:
        """The claim on this queue (with or without suspects) sent at ``since`` found
        nothing. Not marked when a notification for the queue came meanwhile: the job it
        announced may have committed after the claim's snapshot."""
        if self.ttl_s <= 0:
            return
        if max(self._heard_for.get(queue_id, 0), self._heard_for_all) > since:
            return
        self._marks[queue_id] = (self._clock(), suspects)

    def heard(self, queue_id: int | None) -> None:
        """Work may have arrived in this queue; in any queue when None."""
        self._heard += 1
        if queue_id is None:
            self._heard_for_all = self._heard
            self._heard_for.clear()
            self._marks.clear()
        else:
            self._heard_for[queue_id] = self._heard
            self._marks.pop(queue_id, None)

    def heard_payload(self, payload: str | None) -> None:
        """A ``codity_v1`` notification's payload; None or unreadable: any queue."""
        try:
            queue_id = None if payload is None else int(payload)
        except ValueError:
            queue_id = None
        self.heard(queue_id)

    def skip(self, queue_id: int, *, suspects: bool) -> bool:
        """Whether a claim on this queue, with or without suspects, would find nothing."""
        mark = self._marks.get(queue_id)
        if mark is None:
            return False
        when, marked_with_suspects = mark
        if self._clock() - when >= self.ttl_s:
            del self._marks[queue_id]
            return False
        # Found empty of everything, or of what this claim would take (no suspects).
        if marked_with_suspects or not suspects:
            self.skipped += 1
            return True
        return False
