"""How a worker shares its free room among the queues it serves (issue 26).

A worker used to claim its queues in the order given, each claim taking all the room it
could: the first queue with a backlog filled the worker every time, and a queue listed
after it was not asked again until the backlog was gone (from outside: a queue with 10 jobs
a second waited 51 s at p50, 80 s at p99, behind 50,000 jobs of another).

Now each claim round hands the room out in shares: every queue that may have work (not
marked empty, codity.worker.empty_queues) gets the room in proportion to its weight,
rounded so that the shares add up to the room, and the round starts one queue further
along each time, so that no queue is always first when the room does not go round. A queue
that came back with less than its share leaves the rest to the queues that filled theirs,
in the same round when enough is left. With one queue busy and the others empty, it gets
all of the room, as before: the empty ones are not asked.

A worker serving several projects (tenants) shares in two levels: first equally among the
projects with a queue that may have work, then within each project by its queues' weights
(``by_project``), so that a tenant's share does not grow with the number of queues it
makes, and a noisy tenant's backlog leaves a quiet tenant its half of the room.

Shares alone cut the claims small: with eight queues full, each claim took an eighth of the
room, and every claim is a call with its own cost (a durable commit; on Citus, a statement
planned on the coordinator and again on the node). The 8-queue drain fell from 24,900 to
16,500-19,000 jobs/s on one server and from 0.74x to 0.60x plain on Citus, at 79 jobs per
claim instead of about 300 (DESIGN_DECISIONS 75). So a queue that filled its last claim, one
with a backlog, banks its share each round instead (``Credits``, deficit round robin counted
in jobs claimed), and the queues with the most banked are claimed first, each for at least
the low-water mark: with every queue full, one queue takes the round's room and the next
round goes to another, in proportion to the weights over the rounds. A queue whose last claim
came back short (a trickle, a limited queue, a new one) is still asked for its share every
round, before the backlogs: it costs a call but little room, and it is what keeps a trickle's
pickup short behind a backlog.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TypeVar

__all__ = ["Credits", "by_project", "in_turn", "shares"]

T = TypeVar("T")


def in_turn(items: Sequence[T], turn: int) -> list[T]:
    """``items`` starting at position ``turn`` (modulo their number), wrapping round."""
    if not items:
        return []
    start = turn % len(items)
    return [*items[start:], *items[:start]]


def by_project(projects: Sequence[object], weights: Sequence[float]) -> list[float]:
    """Each queue's weight within the room as a whole: the projects (one per queue) share
    equally, and each project's part goes to its queues in proportion to their ``weights``.
    With one project, the weights come back as they are."""
    totals: dict[object, float] = {}
    for project, weight in zip(projects, weights, strict=True):
        totals[project] = totals.get(project, 0.0) + weight
    if len(totals) <= 1:
        return list(weights)
    return [w / totals[p] for p, w in zip(projects, weights, strict=True)]


def shares(room: int, weights: Sequence[float]) -> list[int]:
    """``room`` split in proportion to ``weights`` (largest remainders first, the earlier
    one on a tie), adding up to ``room``. A queue whose exact share is under one may get
    nothing, when the room is short: the next round starts further along."""
    total = sum(weights)
    if room <= 0 or total <= 0:
        return [0] * len(weights)
    exact = [room * w / total for w in weights]
    whole = [int(x) for x in exact]
    left = room - sum(whole)
    by_remainder = sorted(range(len(weights)), key=lambda i: (-(exact[i] - whole[i]), i))
    for i in by_remainder[:left]:
        whole[i] += 1
    return whole


class Credits:
    """What each queue with a backlog is owed, in jobs, across claim rounds.

    A queue is *full* when its last claim came back with all it asked for: it has a backlog,
    and it banks its share of each round (``earn``) rather than being asked for it there and
    then. ``by_owed`` puts the full queues with the most banked first; ``want`` is what such
    a queue's claim asks for; ``claimed`` takes what came back off what it is owed. A claim
    that comes back short makes its queue *light* again and forgets what it was owed (it has
    no backlog to be owed against: deficit round robin's reset for a queue gone empty). What
    a queue is owed stays within ``cap`` either way, so a change in the queues served cannot
    leave one owed, or owing, without bound."""

    def __init__(self, cap: int) -> None:
        self._cap = float(max(1, cap))
        self._owed: dict[int, float] = {}  # by queue id, full queues only

    def full(self, queue_id: int) -> bool:
        return queue_id in self._owed

    def earn(self, queue_ids: Sequence[int], fair: Sequence[int]) -> None:
        """Each full queue of ``queue_ids`` banks its share ``fair`` of this round."""
        for queue_id, share in zip(queue_ids, fair, strict=True):
            if queue_id in self._owed:
                self._owed[queue_id] = min(self._cap, self._owed[queue_id] + share)

    def by_owed(self, queue_ids: Sequence[int]) -> list[int]:
        """The full queues of ``queue_ids``, the most owed first (the earlier on a tie)."""
        full = [q for q in queue_ids if q in self._owed]
        return sorted(full, key=lambda q: -self._owed[q])

    def want(self, queue_id: int, floor: int) -> int:
        """A full queue's claim: what it is owed, and never less than ``floor``."""
        return max(floor, math.ceil(self._owed.get(queue_id, 0.0)))

    def claimed(self, queue_id: int, want: int, got: int) -> None:
        """A claim of ``queue_id`` for ``want`` jobs brought ``got``."""
        if got < want:
            self._owed.pop(queue_id, None)
        elif queue_id in self._owed:
            self._owed[queue_id] = max(-self._cap, self._owed[queue_id] - got)
        else:
            self._owed[queue_id] = 0.0  # filled its share: from the next round, it banks
