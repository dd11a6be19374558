"""The claim round's arithmetic (codity.worker.fair_share), apart from any database.

The workers' behaviour is proven on a real server in test_worker_fairness.py and
test_worker_tenants.py; these pin the rules those tests rest on: shares add up to the
room, and what full queues bank converges on their weights with one whole claim a round.
"""

from __future__ import annotations

from codity.worker.fair_share import Credits, shares


def _rounds(weights: dict[int, float], room: int, floor: int, n: int) -> dict[int, int]:
    """``n`` rounds of queues that always fill their claims: each round the most owed queue
    takes the whole room (as Worker._claim_once does when one claim leaves too little)."""
    credits = Credits(cap=4 * room)
    got = dict.fromkeys(weights, 0)
    ids = list(weights)
    for q in ids:
        credits.claimed(q, 1, 1)  # each filled its first share: full from now on
    for _ in range(n):
        credits.earn(ids, shares(room, list(weights.values())))
        first = credits.by_owed(ids)[0]
        want = max(room, credits.want(first, floor))
        credits.claimed(first, want, want)
        got[first] += want
    return got


def test_shares_add_up_to_the_room_largest_remainders_first() -> None:
    assert shares(10, [1, 1, 1]) == [4, 3, 3]
    assert shares(7, [3, 1]) == [5, 2]
    assert shares(0, [1, 2]) == [0, 0]


def test_full_queues_take_whole_rounds_in_proportion_to_their_weights() -> None:
    got = _rounds({1: 3, 2: 1}, room=24, floor=24, n=400)
    assert 2.9 <= got[1] / got[2] <= 3.1, got
    even = _rounds({q: 1 for q in range(8)}, room=200, floor=200, n=800)
    assert max(even.values()) - min(even.values()) <= 200, even  # one round apart at most


def test_a_short_claim_forgets_what_was_owed_and_a_filled_share_starts_banking() -> None:
    credits = Credits(cap=100)
    assert not credits.full(7)
    credits.claimed(7, 10, 10)
    assert credits.full(7) and credits.want(7, 20) == 20
    credits.earn([7], [50])
    assert credits.want(7, 20) == 50
    credits.claimed(7, 50, 3)  # came back short: a trickle now, asked for its share
    assert not credits.full(7) and credits.by_owed([7]) == []


def test_what_is_owed_stays_within_the_cap() -> None:
    credits = Credits(cap=100)
    credits.claimed(1, 1, 1)
    credits.claimed(2, 1, 1)
    for _ in range(50):
        credits.earn([1, 2], [40, 40])
    assert credits.want(1, 0) == 100
    credits.claimed(2, 1000, 1000)
    credits.claimed(2, 1000, 1000)
    credits.earn([1, 2], [0, 150])  # owing at most the cap, it is owed again within a round
    assert credits.by_owed([1, 2]) == [1, 2] and credits.want(2, 0) == 50
