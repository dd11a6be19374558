"""Batches: a set of jobs with callbacks that run when they are all done.

Issue 27. codity.create_batch makes a workflow of kind 'batch': members without edges, and
callbacks after every member (all_done on 'ignore' edges, all_succeeded on 'cancel' edges,
any_dead on 'run' edges), released by the transaction that settles the last member. An
open batch's callbacks count one more parent, the seal. Proven here on a real server:

- each callback runs exactly when it should (all done, all completed, one dead) and is
  cancelled when it cannot; a callback reads the members' outcomes;
- an open batch takes members until sealed, and no callback but any_dead runs before the
  seal; a sealed batch takes none (CD020); sealing twice answers the same;
- the last member settling while the batch is sealed, at the same instant, releases the
  callback exactly once (break it: CODITY_FAULT=unlocked_release);
- retry_workflow and cancel_workflow work on batches;
- bad input is one clear error and writes nothing; an idempotency key returns the batch.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.faults import inject
from tests.sqlapi import create_queue, one, row, table_snapshot


def _job(n: int, queue: str = "img") -> dict[str, Any]:
    return {"queue": queue, "task": "thumb", "payload": {"n": n}}


CALLBACKS = {
    "all_done": {"queue": "img", "task": "report"},
    "all_succeeded": {"queue": "img", "task": "zip"},
    "any_dead": {"queue": "img", "task": "alert"},
}


def _create(
    conn: psycopg.Connection, spec: dict[str, Any]
) -> tuple[int, list[int], dict[str, int]]:
    """The batch id, its members' job ids in order and its callbacks' by name."""
    rows = conn.execute(
        "SELECT batch_id, job_id, callback FROM codity.create_batch(%s)", [Jsonb(spec)]
    ).fetchall()
    members = [job for _, job, callback in rows if callback is None]
    return rows[0][0], members, {callback: job for _, job, callback in rows if callback}


def _status(conn: psycopg.Connection, job: int) -> str:
    return str(one(conn, "SELECT status::text FROM codity.jobs WHERE id = %s", [job]))


def _callbacks(conn: psycopg.Connection, callbacks: dict[str, int]) -> dict[str, str]:
    return {name: _status(conn, job) for name, job in callbacks.items()}


def _settle(conn: psycopg.Connection, worker: int, outcomes: dict[int, str]) -> None:
    """Claim the img queue's jobs and settle the given members: completed or dead."""
    held: dict[int, int] = dict(
        conn.execute(
            "SELECT job_id, fence FROM codity.claim(%s, 'img', 1000, p_start => true)", [worker]
        ).fetchall()
    )
    for job, outcome in outcomes.items():
        if outcome == "completed":
            conn.execute(
                "SELECT * FROM codity.complete(%s, %s, %s)", [job, held[job], Jsonb({"n": job})]
            )
        else:
            conn.execute(
                "SELECT * FROM codity.fail(%s, %s, 'boom', p_retryable => false)", [job, held[job]]
            )
    for job, fence in held.items():  # the rest go back, attempt refunded
        if job not in outcomes:
            conn.execute("SELECT * FROM codity.release(%s, %s)", [job, fence])


@pytest.fixture
def worker(conn: psycopg.Connection) -> int:
    create_queue(conn, "img", max_attempts=1)
    return int(row(conn, "SELECT codity.register_worker('w', ARRAY['img'])")[0])


def test_callbacks_of_a_batch_whose_members_all_complete(
    conn: psycopg.Connection, worker: int
) -> None:
    batch, members, callbacks = _create(
        conn, {"jobs": [_job(n) for n in range(3)], "callbacks": CALLBACKS}
    )
    assert _callbacks(conn, callbacks) == {
        "all_done": "waiting",
        "all_succeeded": "waiting",
        "any_dead": "waiting",
    }
    _settle(conn, worker, {members[0]: "completed", members[1]: "completed"})
    assert _callbacks(conn, callbacks)["all_done"] == "waiting"
    _settle(conn, worker, {members[2]: "completed"})
    assert _callbacks(conn, callbacks) == {
        "all_done": "queued",
        "all_succeeded": "queued",
        "any_dead": "cancelled",
    }
    # all_done reads every member's outcome and result in one call.
    job, fence = row(
        conn,
        "SELECT job_id, fence FROM codity.claim(%s, 'img', 1, p_start => true)",
        [worker],
    )
    outcomes = conn.execute(
        "SELECT job_id, outcome, result FROM codity.dep_results("
        "(SELECT queue_id FROM codity.jobs WHERE id = %s), %s, %s) ORDER BY job_id",
        [job, job, fence],
    ).fetchall()
    assert outcomes == [(m, "completed", {"n": m}) for m in members]
    assert one(conn, "SELECT nodes FROM codity.workflows WHERE id = %s", [batch]) == 6


def test_a_dead_member_runs_any_dead_at_once_and_cancels_all_succeeded(
    conn: psycopg.Connection, worker: int
) -> None:
    _, members, callbacks = _create(
        conn, {"jobs": [_job(n) for n in range(3)], "callbacks": CALLBACKS}
    )
    _settle(conn, worker, {members[0]: "dead"})
    assert _callbacks(conn, callbacks) == {
        "all_done": "waiting",
        "all_succeeded": "cancelled",
        "any_dead": "queued",
    }
    _settle(
        conn,
        worker,
        {members[1]: "completed", members[2]: "dead", callbacks["any_dead"]: "completed"},
    )
    assert _callbacks(conn, callbacks) == {
        "all_done": "queued",
        "all_succeeded": "cancelled",
        "any_dead": "completed",
    }


def test_an_open_batch_takes_members_until_sealed_and_its_callbacks_wait_for_the_seal(
    conn: psycopg.Connection, worker: int
) -> None:
    batch, members, callbacks = _create(
        conn, {"open": True, "jobs": [_job(0)], "callbacks": {"all_done": CALLBACKS["all_done"]}}
    )
    _settle(conn, worker, {members[0]: "completed"})
    assert _callbacks(conn, callbacks) == {"all_done": "waiting"}  # the seal is still a parent
    added = [
        job for (job,) in conn.execute(
            "SELECT job_id FROM codity.add_to_batch(%s, %s)", [batch, Jsonb([_job(1), _job(2)])]
        ).fetchall()
    ]  # fmt: skip
    assert (
        one(conn, "SELECT deps_remaining FROM codity.jobs WHERE id = %s", [callbacks["all_done"]])
        == 3
    )
    _settle(conn, worker, dict.fromkeys(added, "completed"))
    assert _callbacks(conn, callbacks) == {"all_done": "waiting"}
    sealed = conn.execute(
        "SELECT callback, job_status::text FROM codity.seal_batch(%s)", [batch]
    ).fetchall()
    assert sealed == [("all_done", "queued")]
    again = conn.execute(
        "SELECT callback, job_status::text, sealed_at FROM codity.seal_batch(%s)", [batch]
    )
    assert [r[:2] for r in again.fetchall()] == [("all_done", "queued")]
    before = table_snapshot(conn)
    with pytest.raises(psycopg.Error) as caught:
        conn.execute("SELECT * FROM codity.add_to_batch(%s, %s)", [batch, Jsonb([_job(3)])])
    assert caught.value.sqlstate == "CD020" and "was sealed" in str(caught.value)
    assert table_snapshot(conn) == before


def test_an_empty_sealed_batch_runs_its_callbacks_at_once(
    conn: psycopg.Connection, worker: int
) -> None:
    _, members, callbacks = _create(conn, {"jobs": [], "callbacks": CALLBACKS})
    assert members == []
    assert _callbacks(conn, callbacks) == {
        "all_done": "queued",
        "all_succeeded": "queued",
        "any_dead": "cancelled",
    }


def _seal_while_the_last_member_completes(db_url: str, seal_first: bool) -> tuple[str, int, int]:
    """An open batch with one member held: one session completes it, another seals the
    batch, commits interleaved (the second waits on the callback's row lock). Returns the
    callback's status, its count, and how often its queue was woken afterwards."""
    with (
        psycopg.connect(db_url, autocommit=True) as conn,
        psycopg.connect(db_url, autocommit=True) as listener,
        psycopg.connect(db_url) as completer,
        psycopg.connect(db_url) as sealer,
    ):
        batch, _, callbacks = _create(
            conn,
            {"open": True, "jobs": [_job(0)], "callbacks": {"all_done": CALLBACKS["all_done"]}},
        )
        (worker,) = row(conn, "SELECT codity.register_worker('w', ARRAY['img'])")
        [(job, fence)] = conn.execute(
            "SELECT job_id, fence FROM codity.claim(%s, 'img', 1, p_start => true)", [worker]
        ).fetchall()
        listener.execute("LISTEN codity_v1")
        calls = [
            (completer, "SELECT * FROM codity.complete(%s, %s)", [job, fence]),
            (sealer, "SELECT * FROM codity.seal_batch(%s)", [batch]),
        ]
        first, second = calls[::-1] if seal_first else calls
        first[0].execute(first[1], first[2])
        done = threading.Event()

        def run_second() -> None:
            second[0].execute(second[1], second[2])
            done.set()

        thread = threading.Thread(target=run_second)
        thread.start()
        pid = second[0].info.backend_pid
        deadline = time.monotonic() + 10
        while (
            one(conn, "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid])
            != "Lock"
        ):
            assert time.monotonic() < deadline and not done.is_set(), "the second did not wait"
            time.sleep(0.005)
        first[0].commit()
        thread.join(10)
        assert done.is_set()
        second[0].commit()
        queue = one(conn, "SELECT queue_id FROM codity.jobs WHERE id = %s", [callbacks["all_done"]])
        listener.execute("SELECT 1")
        woken = sum(1 for n in listener.notifies(timeout=0.2) if n.payload == str(queue))
        status, remaining = row(
            conn,
            "SELECT status::text, deps_remaining FROM codity.jobs WHERE id = %s",
            [callbacks["all_done"]],
        )
        conn.execute("DELETE FROM codity.jobs")
        conn.execute("DELETE FROM codity.workflows")
        return status, remaining, woken


@pytest.mark.parametrize("fault", [None, "unlocked_release"])
def test_the_seal_and_the_last_member_at_once_release_the_callback_exactly_once(
    db_url: str, conn: psycopg.Connection, worker: int, fault: str | None
) -> None:
    """20 runs, each order of commit 10 times. The seal waits for the member's settlement
    on the callback's row (or the other way round) and counts down from what it committed.
    With the fault, the settlement counts from a value read before the seal's commit."""
    if fault:
        inject(db_url, fault)
    outcomes = [_seal_while_the_last_member_completes(db_url, run % 2 == 0) for run in range(20)]
    if fault:
        assert any(o != ("queued", 0, 1) for o in outcomes), outcomes
    else:
        assert set(outcomes) == {("queued", 0, 1)}, outcomes


def test_retry_and_cancel_work_on_a_batch(conn: psycopg.Connection, worker: int) -> None:
    batch, members, callbacks = _create(conn, {"jobs": [_job(0), _job(1)], "callbacks": CALLBACKS})
    _settle(conn, worker, {members[0]: "dead", members[1]: "completed"})
    _settle(conn, worker, {callbacks["any_dead"]: "completed", callbacks["all_done"]: "completed"})
    retried = conn.execute(
        "SELECT job_id, job_status::text FROM codity.retry_workflow(%s) ORDER BY job_id", [batch]
    ).fetchall()
    # The dead member and the callback it cancelled; any_dead ran and all_done completed.
    assert retried == sorted([(members[0], "queued"), (callbacks["all_succeeded"], "waiting")])
    _settle(conn, worker, {members[0]: "completed"})
    assert _callbacks(conn, callbacks)["all_succeeded"] == "queued"

    open_batch, _, open_callbacks = _create(
        conn, {"open": True, "jobs": [_job(5)], "callbacks": {"all_done": CALLBACKS["all_done"]}}
    )
    cancelled = conn.execute(
        "SELECT count(*) FROM codity.cancel_workflow(%s)", [open_batch]
    ).fetchone()
    assert cancelled == (2,)
    assert _callbacks(conn, open_callbacks) == {"all_done": "cancelled"}
    assert one(
        conn, "SELECT sealed_at IS NOT NULL FROM codity.workflows WHERE id = %s", [open_batch]
    )


def test_a_repeated_idempotency_key_returns_the_same_batch(
    conn: psycopg.Connection, worker: int
) -> None:
    spec = {
        "idempotency_key": "import-7",
        "jobs": [_job(0)],
        "callbacks": {"all_done": CALLBACKS["all_done"]},
    }
    first = conn.execute(
        "SELECT batch_id, job_id, is_new FROM codity.create_batch(%s)", [Jsonb(spec)]
    ).fetchall()
    again = conn.execute(
        "SELECT batch_id, job_id, is_new FROM codity.create_batch(%s)", [Jsonb(spec)]
    ).fetchall()
    assert [r[:2] for r in again] == [r[:2] for r in first]
    assert {r[2] for r in first} == {True} and {r[2] for r in again} == {False}
    with pytest.raises(psycopg.Error) as caught:
        conn.execute(
            "SELECT * FROM codity.enqueue_workflow(%s)",
            [
                Jsonb(
                    {
                        "idempotency_key": "import-7",
                        "nodes": [{"key": "a", "queue": "img", "task": "t"}],
                    }
                )
            ],
        )
    assert caught.value.sqlstate == "CD010" and "names batch" in str(caught.value)


BAD = [
    ("not an object", [], "CD010", "a batch must be a JSON object"),
    ("unknown key", {"jobs": [], "then": 1}, "CD010", 'unknown key "then"'),
    (
        "unknown callback",
        {"jobs": [], "callbacks": {"sometimes": {"queue": "img", "task": "t"}}},
        "CD010",
        "any of all_done",
    ),
    (
        "a callback without a queue",
        {"jobs": [], "callbacks": {"all_done": {"task": "t"}}},
        "CD010",
        "callback all_done is a job object",
    ),
    (
        "a member without a queue",
        {"jobs": [{"task": "t"}]},
        "CD010",
        'job 1 of the batch needs a "queue"',
    ),
    ("an unknown queue", {"jobs": [_job(0, "nowhere")]}, "CD001", '"nowhere"'),
    (
        "a bad member",
        {"jobs": [_job(0), {**_job(1), "priority": 5000}]},
        "CD010",
        "job 2 of the batch is invalid: priority",
    ),
    ("a member key", {"jobs": [{**_job(0), "after": ["x"]}]}, "CD010", 'unknown key "after"'),
    (
        "too many at once",
        {"jobs": [_job(n) for n in range(10_001)]},
        "CD010",
        "at most 10000 jobs join a batch in one call",
    ),
    (
        "a big payload",
        {"jobs": [{**_job(0), "payload": {"x": "y" * 70_000}}]},
        "CD011",
        "the limit is 65536",
    ),
    ("open is not a boolean", {"jobs": [], "open": "yes"}, "CD010", '"open" must be true or false'),
]


@pytest.mark.parametrize(("spec", "state", "said"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_is_one_clear_error_and_writes_nothing(
    conn: psycopg.Connection, worker: int, spec: Any, state: str, said: str
) -> None:
    before = table_snapshot(conn)
    with pytest.raises(psycopg.Error) as caught:
        conn.execute("SELECT * FROM codity.create_batch(%s)", [Jsonb(spec)])
    assert caught.value.sqlstate == state and said in str(caught.value), caught.value
    assert table_snapshot(conn) == before


def test_a_batch_of_ten_thousand_and_its_callback(conn: psycopg.Connection, worker: int) -> None:
    """10,000 members in one call, completed 1,000 a call as a worker's batches are: the
    last call releases the callback. Timings printed (./test tests/test_batches.py -s)."""
    started = time.perf_counter()
    _, _, callbacks = _create(
        conn,
        {
            "jobs": [_job(n) for n in range(10_000)],
            "callbacks": {"all_done": CALLBACKS["all_done"]},
        },
    )
    created = time.perf_counter() - started
    queue = one(conn, "SELECT id FROM codity.queues WHERE name = 'img'")
    started = time.perf_counter()
    for _ in range(10):
        held = conn.execute(
            "SELECT job_id, fence FROM codity.claim(%s, 'img', 1000, p_start => true)", [worker]
        ).fetchall()
        assert len(held) == 1000 and callbacks["all_done"] not in dict(held)
        last = time.perf_counter()
        conn.execute(
            "SELECT * FROM codity.complete_many_in_queue(%s, %s, %s)",
            [queue, [j for j, _ in held], [f for _, f in held]],
        )
        last = time.perf_counter() - last
    drained = time.perf_counter() - started
    assert _callbacks(conn, callbacks) == {"all_done": "queued"}
    assert (
        one(conn, "SELECT deps_remaining FROM codity.jobs WHERE id = %s", [callbacks["all_done"]])
        == 0
    )
    print(
        f"\nbatch of 10,000: created in {created:.2f} s; claimed and completed in {drained:.2f} s;"
        f" the last 1,000, which released the callback, in {last:.3f} s"
    )


@pytest.mark.parametrize("first", ["workflow", "batch"])
def test_a_workflow_and_a_batch_racing_for_one_key_the_second_is_refused(
    db_url: str, conn: psycopg.Connection, worker: int, first: str
) -> None:
    """The second session checks the key before the first commits, then meets the unique
    index: it must refuse the other kind's key (CD010), as it does when it sees the key at
    once, not answer the other kind's jobs as its own (or nothing at all)."""
    calls = {
        "workflow": (
            "SELECT workflow_id FROM codity.enqueue_workflow(%s)",
            {"idempotency_key": "k-race", "nodes": [{"key": "a", "queue": "img", "task": "t"}]},
        ),
        "batch": (
            "SELECT batch_id FROM codity.create_batch(%s)",
            {"idempotency_key": "k-race", "jobs": [_job(0)]},
        ),
    }
    second = "batch" if first == "workflow" else "workflow"
    outcome: dict[str, Any] = {}
    with psycopg.connect(db_url) as holder:
        holder.execute(calls[first][0], [Jsonb(calls[first][1])])  # not committed yet
        holder_pid = holder.info.backend_pid

        def race() -> None:
            with psycopg.connect(db_url, autocommit=True) as other:
                try:
                    outcome["rows"] = other.execute(
                        calls[second][0], [Jsonb(calls[second][1])]
                    ).fetchall()
                except psycopg.Error as exc:
                    outcome["error"] = exc

        racer = threading.Thread(target=race)
        racer.start()
        deadline = time.monotonic() + 10
        while not one(
            conn,
            "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
            [holder_pid],
        ):
            assert time.monotonic() < deadline, "the second call never waited on the key"
            time.sleep(0.01)
        holder.commit()
        racer.join(10)
    error = outcome.get("error")
    assert error is not None, f"the {second} took the {first}'s key: {outcome.get('rows')}"
    assert error.sqlstate == "CD010" and f"names {first}" in str(error), error
    assert one(conn, "SELECT count(*) FROM codity.workflows") == 1
