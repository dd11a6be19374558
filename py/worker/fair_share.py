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
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

__all__ = ["by_project", "in_turn", "shares"]

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
