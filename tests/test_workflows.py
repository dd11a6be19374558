"""Workflows: jobs that wait for jobs, released in the transaction that settles the last parent.

Issue 27. codity.enqueue_workflow inserts every node at once (roots queued, the rest
waiting with the count of their parents) and codity._settle_children, called by every call
that completes, dead-letters or cancels a workflow node, counts its children down under
their row locks. What must hold, each proven here on a real server:

- a graph runs in its order, each node once, and a node reads its parents' results;
- nothing claims a waiting node;
- two parents settled at the same instant release their child exactly once, never zero
  times (break it: CODITY_FAULT=unlocked_release, which counts from a value read before
  the row lock, strands the child);
- a dead-lettered parent cancels what runs after it, all the way down, unless the edge
  says "ignore"; cancelling a node does the same;
- bad input is one clear error and writes nothing; a repeated idempotency key returns the
  same workflow.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from codity.worker import JobContext, Registry, WorkerConfig
from tests.faults import inject
from tests.sqlapi import create_queue, one, row
from tests.worker_runs import run_worker_until


def _enqueue(conn: psycopg.Connection, spec: dict[str, Any]) -> dict[str, tuple[int, int, str]]:
    """The workflow's nodes by key: (job id, queue id, status)."""
    rows = conn.execute(
        "SELECT node_key, job_id, queue_id, job_status::text FROM codity.enqueue_workflow(%s)",
        [Jsonb(spec)],
    ).fetchall()
    return {key: (job, queue, status) for key, job, queue, status in rows}


def _node(key: str, queue: str = "wf", *after: Any, task: str = "t") -> dict[str, Any]:
    node: dict[str, Any] = {"key": key, "queue": queue, "task": task, "payload": {"key": key}}
    if after:
        node["after"] = list(after)
    return node


def _status(conn: psycopg.Connection, job: int) -> tuple[str, int | None]:
    status, remaining = row(
        conn, "SELECT status::text, deps_remaining FROM codity.jobs WHERE id = %s", [job]
    )
    return status, remaining


def _hold(conn: psycopg.Connection, worker: int, queue: str, n: int) -> list[tuple[int, int]]:
    """Claim and start up to n jobs of the queue: (job id, fence)."""
    return [
        (int(j), int(f))
        for j, f in conn.execute(
            "SELECT job_id, fence FROM codity.claim(%s, %s, %s, p_start => true)",
            [worker, queue, n],
        ).fetchall()
    ]


def test_a_graph_runs_in_order_each_node_once_and_reads_its_parents_results(
    db_url: str, conn: psycopg.Connection
) -> None:
    """fetch-a and fetch-b (two queues) -> merge -> report: merge begins only after both
    fetches finished and reads their results; report after merge; one execution each."""
    create_queue(conn, "wf")
    create_queue(conn, "other")
    nodes = _enqueue(
        conn,
        {
            "name": "nightly",
            "nodes": [
                _node("merge", "wf", "fetch-a", "fetch-b"),
                _node("fetch-a", "wf"),
                _node("fetch-b", "other"),
                _node("report", "other", "merge"),
            ],
        },
    )
    assert {k: s for k, (_, _, s) in nodes.items()} == {
        "merge": "waiting", "fetch-a": "queued", "fetch-b": "queued", "report": "waiting",
    }  # fmt: skip
    seen: dict[str, Any] = {}
    ran: dict[str, tuple[float, float]] = {}  # each node's handler: began, ended
    registry = Registry()

    @registry.task("t")
    def handler(payload: Any, ctx: JobContext) -> dict[str, str]:
        began = time.monotonic()
        if payload["key"] == "merge":
            with psycopg.connect(db_url) as own:
                seen["merge"] = own.execute(
                    "SELECT node_key, outcome, result FROM codity.dep_results(%s, %s, %s)",
                    [ctx.queue_id, ctx.job_id, ctx.fence],
                ).fetchall()
        ran[payload["key"]] = (began, time.monotonic())
        return {"from": payload["key"]}

    config = WorkerConfig(queues=("wf", "other"), concurrency=4, heartbeat_s=1.0)
    run_worker_until(
        db_url,
        registry,
        config,
        lambda: one(conn, "SELECT count(*) FROM codity.jobs WHERE status = 'completed'") == 4,
    )
    assert seen["merge"] == [
        ("fetch-a", "completed", {"from": "fetch-a"}),
        ("fetch-b", "completed", {"from": "fetch-b"}),
    ]
    # Every edge: the child's handler began after its parent's had ended (the handlers' own
    # clock: a claim's recorded time is its transaction's start, which may come a moment
    # before the parent's completion commits and makes the child claimable).
    edges = conn.execute(
        "SELECT p.node_key, c.node_key FROM codity.job_deps d"
        " JOIN codity.jobs p ON p.queue_id = d.queue_id AND p.id = d.parent_id"
        " JOIN codity.jobs c ON c.queue_id = d.child_queue_id AND c.id = d.child_id"
    ).fetchall()
    assert len(edges) == 3
    assert all(ran[child][0] >= ran[parent][1] for parent, child in edges), ran
    assert one(conn, "SELECT count(*) FROM codity.job_executions") == 4
    assert one(conn, "SELECT count(*) FROM codity.job_deps WHERE resolved = 'completed'") == 3


def test_nothing_claims_a_waiting_node(conn: psycopg.Connection) -> None:
    create_queue(conn, "wf")
    nodes = _enqueue(conn, {"nodes": [_node("a"), _node("b", "wf", "a"), _node("c", "wf", "b")]})
    (worker,) = row(conn, "SELECT codity.register_worker('w', ARRAY['wf'])")
    assert _hold(conn, worker, "wf", 10) == [(nodes["a"][0], 1)]
    assert _hold(conn, worker, "wf", 10) == []
    assert _status(conn, nodes["b"][0]) == ("waiting", 1)


def settle_both_at_once(db_url: str, first_commits: int) -> tuple[str, int | None, int]:
    """Two parents of one child completed by two sessions, the second blocked on the
    child's row until the first commits; returns the child's status and count, and the
    NOTIFYs its queue got."""
    with (
        psycopg.connect(db_url, autocommit=True) as conn,
        psycopg.connect(db_url, autocommit=True) as listener,
    ):
        listener.execute("LISTEN codity_v1")
        nodes = _enqueue(
            conn,
            {"nodes": [_node("p1", "wf"), _node("p2", "wf"), _node("child", "kids", "p1", "p2")]},
        )
        (worker,) = row(conn, "SELECT codity.register_worker('w', ARRAY['wf'])")
        held = dict(_hold(conn, worker, "wf", 2))
        kids = nodes["child"][1]
        sessions = [psycopg.connect(db_url) for _ in range(2)]
        try:
            calls = [
                (sessions[i], nodes[p][0], held[nodes[p][0]]) for i, p in enumerate(("p1", "p2"))
            ]
            first, second = calls if first_commits == 0 else calls[::-1]
            first[0].execute("SELECT * FROM codity.complete(%s, %s)", [first[1], first[2]])
            pid = second[0].info.backend_pid
            done = threading.Event()

            def settle_second() -> None:
                second[0].execute("SELECT * FROM codity.complete(%s, %s)", [second[1], second[2]])
                done.set()

            thread = threading.Thread(target=settle_second)
            thread.start()
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
        finally:
            for s in sessions:
                s.close()
        status, remaining = _status(conn, nodes["child"][0])
        listener.execute("SELECT 1")
        woken = sum(1 for n in listener.notifies(timeout=0.2) if n.payload == str(kids))
        conn.execute("DELETE FROM codity.jobs")
        conn.execute("DELETE FROM codity.workflows")
        return status, remaining, woken


@pytest.mark.parametrize("fault", [None, "unlocked_release"])
def test_two_parents_settled_at_once_release_the_child_exactly_once(
    db_url: str, conn: psycopg.Connection, fault: str | None
) -> None:
    """40 runs, each order of commit 20 times: the child is queued with no parent left,
    and its queue is woken once. With the fault, the second count goes back to a value read
    before the first committed: the child stays waiting with a parent "left"."""
    create_queue(conn, "wf")
    create_queue(conn, "kids")
    if fault:
        inject(db_url, fault)
    outcomes = [settle_both_at_once(db_url, run % 2) for run in range(40)]
    if fault:
        assert any(o != ("queued", 0, 1) for o in outcomes), outcomes
    else:
        assert set(outcomes) == {("queued", 0, 1)}, outcomes


def test_a_dead_parent_cancels_down_the_graph_unless_the_edge_says_ignore(
    conn: psycopg.Connection,
) -> None:
    """a -> b -> c (cancel, the default) and a -> d (ignore): a dead-lettered a cancels b
    and c, and queues d."""
    create_queue(conn, "wf", max_attempts=1)
    nodes = _enqueue(
        conn,
        {
            "nodes": [
                _node("a"),
                _node("b", "wf", "a"),
                _node("c", "wf", "b"),
                _node("d", "wf", {"key": "a", "on_failure": "ignore"}),
            ]
        },
    )
    (worker,) = row(conn, "SELECT codity.register_worker('w', ARRAY['wf'])")
    [(job, fence)] = _hold(conn, worker, "wf", 10)
    conn.execute("SELECT * FROM codity.fail(%s, %s, 'boom', p_retryable => false)", [job, fence])
    states = {k: _status(conn, nodes[k][0])[0] for k in "abcd"}
    assert states == {"a": "dead_letter", "b": "cancelled", "c": "cancelled", "d": "queued"}
    assert one(conn, "SELECT last_error FROM codity.jobs WHERE id = %s", [nodes["c"][0]]) == (
        "cancelled: a job it runs after did not complete"
    )


def test_a_retryable_failure_leaves_the_children_waiting(conn: psycopg.Connection) -> None:
    create_queue(conn, "wf", max_attempts=3)
    nodes = _enqueue(conn, {"nodes": [_node("a"), _node("b", "wf", "a")]})
    (worker,) = row(conn, "SELECT codity.register_worker('w', ARRAY['wf'])")
    [(job, fence)] = _hold(conn, worker, "wf", 10)
    conn.execute("SELECT * FROM codity.fail(%s, %s, 'flaky')", [job, fence])
    assert _status(conn, nodes["b"][0]) == ("waiting", 1)


def test_cancelling_a_node_cancels_what_runs_after_it(conn: psycopg.Connection) -> None:
    create_queue(conn, "wf")
    nodes = _enqueue(
        conn, {"nodes": [_node("a"), _node("b", "wf", "a"), _node("c", "wf", "b"), _node("x")]}
    )
    conn.execute("SELECT * FROM codity.cancel(%s)", [nodes["b"][0]])
    assert _status(conn, nodes["c"][0])[0] == "cancelled"
    assert _status(conn, nodes["a"][0])[0] == "queued"
    outcome = conn.execute(
        "SELECT outcome FROM codity.cancel_jobs(ARRAY[%s]::bigint[])", [nodes["a"][0]]
    )
    assert outcome.fetchall() == [("cancelled",)]
    assert _status(conn, nodes["x"][0])[0] == "queued"


def test_a_repeated_idempotency_key_returns_the_same_workflow(conn: psycopg.Connection) -> None:
    create_queue(conn, "wf")
    spec = {"idempotency_key": "import-7", "nodes": [_node("a"), _node("b", "wf", "a")]}
    first = conn.execute(
        "SELECT workflow_id, job_id, is_new FROM codity.enqueue_workflow(%s)", [Jsonb(spec)]
    ).fetchall()
    again = conn.execute(
        "SELECT workflow_id, job_id, is_new FROM codity.enqueue_workflow(%s)", [Jsonb(spec)]
    ).fetchall()
    assert [r[:2] for r in again] == [r[:2] for r in first]
    assert {r[2] for r in first} == {True} and {r[2] for r in again} == {False}
    assert one(conn, "SELECT count(*) FROM codity.jobs") == 2


def _many(n: int, after: Any = None) -> list[dict[str, Any]]:
    return [_node(f"n{i}", "wf", *([after] if after else [])) for i in range(n)]


BAD = [
    ("not an object", ["nodes"], "CD010", 'a workflow must be a JSON object with "nodes"'),
    ("no nodes", {"nodes": []}, "CD010", "must be a non-empty JSON array"),
    ("unknown key", {"nodes": [_node("a")], "colour": 1}, "CD010", 'unknown key "colour"'),
    ("a self-edge", {"nodes": [_node("a", "wf", "a")]}, "CD010", 'node "a" runs after itself'),
    (
        "unknown parent",
        {"nodes": [_node("a", "wf", "zz")]},
        "CD010",
        'runs after "zz", which is not a node',
    ),
    ("duplicate key", {"nodes": [_node("a"), _node("a")]}, "CD010", 'node key "a" is given twice'),
    (
        "a cycle",
        {
            "nodes": [
                _node("a", "wf", "c"),
                _node("b", "wf", "a"),
                _node("c", "wf", "b"),
                _node("d"),
            ]
        },
        "CD010",
        "in a cycle: ",
    ),
    (
        "a two-cycle",
        {"nodes": [_node("a", "wf", "b"), _node("b", "wf", "a")]},
        "CD010",
        "in a cycle",
    ),
    ("unknown queue", {"nodes": [_node("a", "nowhere")]}, "CD001", '"nowhere"'),
    (
        "bad policy",
        {"nodes": [_node("a"), _node("b", "wf", {"key": "a", "on_failure": "sometimes"})]},
        "CD010",
        "on_failure",
    ),
    (
        "a workflow that runs on failure",
        {"on_failure": "run", "nodes": [_node("a")]},
        "CD010",
        'on_failure is "cancel", "ignore" or "hold"',
    ),
    (
        "a run edge beside another",
        {
            "nodes": [
                _node("a"),
                _node("b"),
                _node("c", "wf", {"key": "a", "on_failure": "run"}, "b"),
            ]
        },
        "CD010",
        'either every edge of a node is "run" or none is',
    ),
    (
        "a node key",
        {"nodes": [{**_node("a"), "idempotency_key": "x"}]},
        "CD010",
        "takes no idempotency_key",
    ),
    ("bad priority", {"nodes": [{**_node("a"), "priority": 5000}]}, "CD010", "priority must be"),
    ("too many nodes", {"nodes": _many(10_001)}, "CD010", "at most 10000 nodes, got 10001"),
    (
        "too many parents",
        {"nodes": [_node("a"), _node("z", "wf", *(["a"] * 10_001))]},
        "CD010",
        "runs after 10001 nodes; the limit is 10000",
    ),
    (
        "a big payload",
        {"nodes": [{**_node("a"), "payload": {"x": "y" * 70_000}}]},
        "CD011",
        "the limit is 65536",
    ),
]


@pytest.mark.parametrize(("spec", "state", "said"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_is_one_clear_error_and_writes_nothing(
    conn: psycopg.Connection, spec: Any, state: str, said: str
) -> None:
    create_queue(conn, "wf")
    with pytest.raises(psycopg.Error) as caught:
        conn.execute("SELECT * FROM codity.enqueue_workflow(%s)", [Jsonb(spec)])
    assert caught.value.sqlstate == state and said in str(caught.value), caught.value
    counts = row(
        conn,
        "SELECT (SELECT count(*) FROM codity.jobs), (SELECT count(*) FROM codity.workflows),"
        " (SELECT count(*) FROM codity.job_deps)",
    )
    assert counts == (0, 0, 0)


def test_the_cycle_is_named(conn: psycopg.Connection) -> None:
    create_queue(conn, "wf")
    spec = {
        "nodes": [
            _node("d"),
            _node("a", "wf", "c", "d"),
            _node("b", "wf", "a"),
            _node("c", "wf", "b"),
        ]
    }
    with pytest.raises(
        psycopg.Error, match=r"cycle: (a -> c -> b -> a|b -> a -> c -> b|c -> b -> a -> c)"
    ):
        conn.execute("SELECT * FROM codity.enqueue_workflow(%s)", [Jsonb(spec)])


def test_a_wide_fan_out_and_fan_in_enqueue_and_release(conn: psycopg.Connection) -> None:
    """10,000 nodes: one root and 9,999 after it; then 9,999 before one sink. Each graph
    goes in whole, and the sink is queued by the completion of its last parent, not before.
    Times printed (-s)."""
    create_queue(conn, "wf")
    (worker,) = row(conn, "SELECT codity.register_worker('w', ARRAY['wf'])")
    started = time.perf_counter()
    out = _enqueue(conn, {"nodes": [_node("root"), *_many(9_999, "root")]})
    fan_out_s = time.perf_counter() - started
    assert sum(1 for _, _, s in out.values() if s == "waiting") == 9_999
    [(root, fence)] = _hold(conn, worker, "wf", 10)
    started = time.perf_counter()
    conn.execute("SELECT * FROM codity.complete(%s, %s)", [root, fence])
    release_s = time.perf_counter() - started
    assert one(conn, "SELECT count(*) FROM codity.jobs WHERE status = 'queued'") == 9_999
    conn.execute("DELETE FROM codity.jobs")

    started = time.perf_counter()
    spec = {"nodes": [*_many(9_999), _node("sink", "wf", *(f"n{i}" for i in range(9_999)))]}
    sink_nodes = _enqueue(conn, spec)
    fan_in_s = time.perf_counter() - started
    sink = sink_nodes["sink"][0]
    mine: list[tuple[int, int]] = []
    while len(mine) < 9_999:
        mine += _hold(conn, worker, "wf", 1000)
    for start in range(0, len(mine) - 1, 1000):
        part = mine[start : min(start + 1000, len(mine) - 1)]
        conn.execute(
            "SELECT * FROM codity.complete_many(%s::bigint[], %s::integer[])",
            [[j for j, _ in part], [f for _, f in part]],
        )
    assert _status(conn, sink) == ("waiting", 1)
    started = time.perf_counter()
    conn.execute("SELECT * FROM codity.complete(%s, %s)", mine[-1])
    last_s = time.perf_counter() - started
    assert _status(conn, sink) == ("queued", 0)
    print(
        f"fan-out 10,000: enqueued in {fan_out_s:.2f}s, root's completion released 9,999 in"
        f" {release_s:.2f}s; 9,999 -> 1 fan-in: enqueued in {fan_in_s:.2f}s,"
        f" the last parent's completion (the sink released) {last_s * 1000:.1f} ms"
    )


def test_retention_keeps_a_workflow_until_every_node_has_finished(conn: psycopg.Connection) -> None:
    """a done, b still waiting: a year later prune keeps a (b may still read its result);
    once b is done too, both go."""
    create_queue(conn, "wf", keep_completed_seconds=60)
    nodes = _enqueue(conn, {"nodes": [_node("a"), _node("b", "wf", "a", "c"), _node("c")]})
    (worker,) = row(conn, "SELECT codity.register_worker('w', ARRAY['wf'])")
    for job, fence in _hold(conn, worker, "wf", 1):
        conn.execute("SELECT * FROM codity.complete(%s, %s)", [job, fence])
    later = "SELECT jobs FROM codity.prune(now() + interval '1 year')"
    assert one(conn, later) == 0
    conn.execute("SELECT codity.roll_up(now() + interval '1 year')")
    assert one(conn, later) == 0
    conn.execute("SELECT * FROM codity.cancel(%s)", [nodes["c"][0]])  # b is cancelled with it
    assert _status(conn, nodes["b"][0])[0] == "cancelled"
    conn.execute("SELECT codity.roll_up(now() + interval '1 year')")
    assert one(conn, later) == 3


def test_an_async_handler_reads_its_parents_through_its_context(
    db_url: str, conn: psycopg.Connection
) -> None:
    """ctx.parent_results(): the parents by key with status, outcome and result; a plain
    job gets none."""
    create_queue(conn, "wf")
    _enqueue(conn, {"nodes": [_node("a"), _node("b", "wf", {"key": "a"})]})
    conn.execute("SELECT codity.enqueue('wf', 'plain')")
    seen: dict[str, Any] = {}
    registry = Registry()

    @registry.task("t")
    async def node(payload: Any, ctx: JobContext) -> dict[str, str]:
        seen[payload["key"]] = await ctx.parent_results()
        return {"made_by": payload["key"]}

    @registry.task("plain")
    async def plain(payload: Any, ctx: JobContext) -> None:
        seen["plain"] = await ctx.parent_results()

    config = WorkerConfig(queues=("wf",), concurrency=2, heartbeat_s=1.0)
    run_worker_until(db_url, registry, config, lambda: len(seen) == 3)
    assert seen["a"] == {} and seen["plain"] == {}
    assert seen["b"] == {
        "a": {
            "job_id": seen["b"]["a"]["job_id"],
            "status": "completed",
            "outcome": "completed",
            "result": {"made_by": "a"},
        }
    }
