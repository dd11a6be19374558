"""Workflows and batches on a real Citus 14 cluster (a coordinator and two worker nodes on
loopback): the deferred mode of docs/DESIGN_DECISIONS.md 73.

On a cluster, the bodies Citus runs on a queue's node (complete_many_in_queue, fail_in_queue,
reap_in_queue) cannot write a workflow node's children, whose queues live on other nodes: a
settled node leaves one row in codity.workflow_events on its own shard, and codity.tick folds
the rows into the children on the coordinator (codity._fold_settlements), deleting them in the
same transaction. What must hold, each proven here with queues spread over both worker nodes
(every test checks that they are):

- a workflow across the nodes runs in order, each node once, and a node reads its parents'
  results (a real worker and a ticking scheduler); so do three random graphs of 40 nodes;
- two parents completed at once, on two nodes, release their child exactly once, and two
  folds at once fold each settlement once (the second finds nothing); a resent completion
  leaves no second row, and a fold killed before its COMMIT leaves the row for the next tick;
- a fan-in of 60 parents over four queues releases its child once, only after the last;
- a batch's callbacks (all_done, all_succeeded, any_dead) across the nodes, and an open batch
  grown, completed and sealed;
- a held and a cancelled branch, retry_workflow, skip_node and retry_job on a node whose
  settlement is still waiting to be folded (each folds it first: what one server shows),
  and cancel_workflow;
- the time from the last parent's completion to the child's release, with a scheduler
  ticking every 200 ms (printed; ``-s``).

Nothing is ordered by sleeping: the tests poll the coordinator, and interleavings are driven
through open transactions.

Break it (checked on every run by the last three tests, and by hand with
``CODITY_FAULT=<name> ./test -m citus tests/test_citus_workflows.py``): ``fold_keeps_events``
(the fold reads the rows without deleting them: a second fold folds the same settlements
again, and rows stay) fails the worker, two-parents, fan-in, batch and operators tests;
``no_fold`` (tick does not fold) strands every child: the worker, fan-in, batch, operators and
latency tests fail; ``no_fold_first`` (an operator resets a node without folding its
pending settlement first) fails the operators test: the tick folds the old outcome after the
rerun and strands the held child.
"""

from __future__ import annotations

import os
import random
import statistics
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from codity.db import citus as citus_distribution
from codity.worker import JobContext, Registry, WorkerConfig
from tests.citus import CitusCluster
from tests.faults import inject
from tests.processes import Ticker, wait_until
from tests.sqlapi import NO_BACKOFF, create_queue, one, row
from tests.worker_runs import run_worker_until

pytestmark = pytest.mark.citus

Conn = psycopg.Connection[Any]
CLAIM = "SELECT job_id, fence FROM codity.claim_in_queue(%s, %s, %s, true, p_start => true)"
COMPLETE = (
    "SELECT job_id, outcome::text FROM codity.complete_many_in_queue("
    "%s, %s::bigint[], %s::integer[], %s::jsonb[])"
)
FAIL_DEAD = "SELECT * FROM codity.fail_in_queue(%s, %s, %s, 'boom', false)"


# -- fixtures and helpers -----------------------------------------------------------------------


@pytest.fixture
def cluster_url(citus_db_url: str) -> str:
    """This test's distributed database, with the fault CODITY_FAULT names, if any."""
    fault = os.environ.get("CODITY_FAULT")
    if fault:
        _inject(citus_db_url, fault)
    return citus_db_url


def _inject(url: str, fault: str) -> None:
    inject(url, fault)
    with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
        citus_distribution.adjust_functions(conn)


@pytest.fixture
def conn(cluster_url: str) -> Iterator[Conn]:
    with psycopg.connect(cluster_url, autocommit=True) as connection:
        yield connection


def spread_queues(cluster: CitusCluster, conn: Conn, count: int) -> list[tuple[str, int]]:
    """``count`` queues (name, id), one node after the other: queue i is on worker node
    i % 2. Fails when the ids drawn do not reach both nodes."""
    by_node: dict[int, list[tuple[str, int]]] = {w.port: [] for w in cluster.workers}
    for n in range(8 * count):
        name = f"wq-{n}"
        queue = create_queue(conn, name, max_attempts=1, **NO_BACKOFF)
        by_node[cluster.node_port_of(conn.info.dbname, "codity.jobs", queue)].append((name, queue))
        if all(len(q) >= (count + 1) // 2 for q in by_node.values()):
            first, second = by_node.values()
            return [(first if i % 2 == 0 else second)[i // 2] for i in range(count)]
    raise AssertionError(f"the queues did not spread over both worker nodes: {by_node}")


def _node(key: str, queue: str, *after: Any, task: str = "t") -> dict[str, Any]:
    node: dict[str, Any] = {"key": key, "queue": queue, "task": task, "payload": {"key": key}}
    if after:
        node["after"] = list(after)
    return node


def _enqueue(conn: Conn, spec: dict[str, Any]) -> tuple[int, dict[str, int]]:
    """The workflow's id and its nodes' job ids by key."""
    rows = conn.execute(
        "SELECT workflow_id, node_key, job_id FROM codity.enqueue_workflow(%s)", [Jsonb(spec)]
    ).fetchall()
    return rows[0][0], {key: job for _, key, job in rows}


def _status(conn: Conn, job: int) -> tuple[str, int | None]:
    status, remaining = row(
        conn, "SELECT status::text, deps_remaining FROM codity.jobs WHERE id = %s", [job]
    )
    return status, remaining


def _statuses(conn: Conn, workflow: int) -> dict[str, str]:
    return dict(
        conn.execute(
            "SELECT node_key, status::text FROM codity.jobs WHERE workflow_id = %s", [workflow]
        ).fetchall()
    )


def _worker(conn: Conn, queues: list[tuple[str, int]]) -> int:
    return int(one(conn, "SELECT codity.register_worker('w', %s)", [[n for n, _ in queues]]))


def _claim(conn: Conn, queue: int, worker: int, limit: int = 100) -> list[tuple[int, int]]:
    return [(int(j), int(f)) for j, f in conn.execute(CLAIM, [queue, worker, limit]).fetchall()]


def _complete(conn: Conn, queue: int, held: list[tuple[int, int]]) -> None:
    """Complete held jobs through the body by queue id (a bare call: Citus sends it whole to
    the queue's node), each with the result {"from": job id}."""
    rows = conn.execute(
        COMPLETE,
        [queue, [j for j, _ in held], [f for _, f in held], [Jsonb({"from": j}) for j, _ in held]],
    ).fetchall()
    assert [outcome for _, outcome in rows] == ["applied"] * len(held), rows


def _run_one(conn: Conn, queue: int, worker: int, job: int) -> None:
    """Claim the queue's only queued job, which must be ``job``, and complete it."""
    held = _claim(conn, queue, worker)
    assert [j for j, _ in held] == [job], held
    _complete(conn, queue, held)


def _dead(conn: Conn, queue: int, worker: int, job: int) -> None:
    """Claim the queue's only queued job, ``job``, and fail it for good (dead-lettered)."""
    ((held, fence),) = _claim(conn, queue, worker)
    assert held == job
    conn.execute(FAIL_DEAD, [queue, job, fence])


def _events(conn: Conn) -> int:
    return int(one(conn, "SELECT count(*) FROM codity.workflow_events"))


def _fold(conn: Conn) -> int:
    """codity.tick's fold on its own: how many settlements it folded."""
    return int(one(conn, "SELECT codity._fold_settlements(now())"))


def _tick(conn: Conn) -> None:
    conn.execute("SELECT * FROM codity.tick()")


# -- a workflow across the nodes, run by a real worker --------------------------------------------


def test_a_workflow_across_the_nodes_runs_in_order_each_node_once_and_reads_its_parents_results(
    citus_cluster: CitusCluster, cluster_url: str, conn: Conn
) -> None:
    """fetch-a (node 1) and fetch-b (node 2) -> merge (node 1) -> report (node 2), run by one
    worker serving the four queues while a scheduler ticks: merge begins only after both
    fetches ended and reads their results; report after merge; one execution each."""
    (qa, _), (qb, _), (qm, _), (qr, _) = queues = spread_queues(citus_cluster, conn, 4)
    workflow, nodes = _enqueue(
        conn,
        {
            "name": "nightly",
            "nodes": [
                _node("merge", qm, "fetch-a", "fetch-b"),
                _node("fetch-a", qa),
                _node("fetch-b", qb),
                _node("report", qr, "merge"),
            ],
        },
    )
    seen: dict[str, Any] = {}
    ran: dict[str, tuple[float, float]] = {}
    registry = Registry()

    @registry.task("t")
    def handler(payload: Any, ctx: JobContext) -> dict[str, str]:
        began = time.monotonic()
        if payload["key"] == "merge":
            with psycopg.connect(cluster_url) as own:
                seen["merge"] = own.execute(
                    "SELECT node_key, outcome, result FROM codity.dep_results(%s, %s, %s)"
                    " ORDER BY node_key",
                    [ctx.queue_id, ctx.job_id, ctx.fence],
                ).fetchall()
        ran[payload["key"]] = (began, time.monotonic())
        return {"from": payload["key"]}

    config = WorkerConfig(queues=tuple(n for n, _ in queues), concurrency=4, heartbeat_s=1.0)
    with Ticker(cluster_url, interval=0.1) as ticker:
        run_worker_until(
            cluster_url,
            registry,
            config,
            lambda: _statuses(conn, workflow) == dict.fromkeys(nodes, "completed"),
        )
    assert ticker.errors == []
    assert seen["merge"] == [
        ("fetch-a", "completed", {"from": "fetch-a"}),
        ("fetch-b", "completed", {"from": "fetch-b"}),
    ]
    for parent, child in (("fetch-a", "merge"), ("fetch-b", "merge"), ("merge", "report")):
        assert ran[child][0] >= ran[parent][1], ran
    executions = conn.execute(
        "SELECT job_id, count(*), min(status::text) FROM codity.job_executions GROUP BY job_id"
    ).fetchall()
    assert sorted(executions) == sorted((job, 1, "completed") for job in nodes.values())
    assert one(conn, "SELECT count(*) FROM codity.job_deps WHERE resolved = 'completed'") == 3
    assert _events(conn) == 0


def test_random_graphs_across_the_nodes_run_each_node_once_after_all_its_parents(
    citus_cluster: CitusCluster, cluster_url: str, conn: Conn
) -> None:
    """Three graphs of 40 nodes each over four queues (two a node), every node after up to
    three earlier ones (a fixed seed), run by one worker of 8 slots while a scheduler ticks
    every 50 ms: each node runs once, and starts after every parent finished (the database's
    clock on every node of this machine)."""
    rng = random.Random(71)
    queues = spread_queues(citus_cluster, conn, 4)
    workflows = []
    for g in range(3):
        nodes = []
        for n in range(40):
            after = rng.sample(range(n), k=min(n, rng.randint(0, 3)))
            nodes.append(_node(f"n{n}", queues[rng.randrange(4)][0], *(f"n{a}" for a in after)))
        workflows.append(_enqueue(conn, {"name": f"g{g}", "nodes": nodes})[0])
    registry = Registry()

    @registry.task("t")
    def handler(payload: Any, ctx: JobContext) -> None:
        return None

    def done() -> bool:
        return all(set(_statuses(conn, w).values()) == {"completed"} for w in workflows)

    config = WorkerConfig(queues=tuple(n for n, _ in queues), concurrency=8, heartbeat_s=1.0)
    with Ticker(cluster_url, interval=0.05) as ticker:
        run_worker_until(cluster_url, registry, config, done, within=120)
    assert ticker.errors == []
    executions = conn.execute(
        "SELECT job_id, count(*), min(status::text), min(started_at), max(finished_at)"
        " FROM codity.job_executions GROUP BY job_id"
    ).fetchall()
    assert len(executions) == 120
    assert {(count, status) for _, count, status, _, _ in executions} == {(1, "completed")}
    ran = {job: (started, finished) for job, _, _, started, finished in executions}
    edges = conn.execute(
        "SELECT parent_id, child_id, resolved FROM codity.job_deps WHERE workflow_id = ANY (%s)",
        [workflows],
    ).fetchall()
    assert edges and {resolved for _, _, resolved in edges} == {"completed"}
    assert all(ran[child][0] >= ran[parent][1] for parent, child, _ in edges)
    assert _events(conn) == 0


# -- exactly once --------------------------------------------------------------------------------


def settle_two_parents_at_once(cluster: CitusCluster, url: str) -> dict[str, Any]:
    """p1 (node 1) and p2 (node 2) -> child (node 1). Both parents completed at the same
    instant by two sessions, each call sent whole to its queue's node; then two folds at once:
    the first holds its transaction open while the second runs, and runs again after the
    first committed. Returns what each step saw."""
    seen: dict[str, Any] = {}
    with (
        psycopg.connect(url, autocommit=True) as conn,
        psycopg.connect(url, autocommit=True) as listener,
    ):
        (q1, q1_id), (q2, q2_id) = queues = spread_queues(cluster, conn, 2)
        listener.execute("LISTEN codity_v1")
        _, nodes = _enqueue(
            conn, {"nodes": [_node("p1", q1), _node("p2", q2), _node("child", q1, "p1", "p2")]}
        )
        worker = _worker(conn, queues)
        held = {q1_id: _claim(conn, q1_id, worker), q2_id: _claim(conn, q2_id, worker)}
        listener.execute("SELECT 1")
        assert sum(1 for _ in listener.notifies(timeout=0.2)) > 0  # the enqueue's, drained
        start = threading.Barrier(2)
        errors: list[BaseException] = []

        def complete(queue: int) -> None:
            try:
                with psycopg.connect(url, autocommit=True) as own:
                    start.wait(10)
                    _complete(own, queue, held[queue])
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=complete, args=(q,)) for q in (q1_id, q2_id)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert errors == []
        seen["before_fold"] = _status(conn, nodes["child"])
        seen["events_before"] = _events(conn)
        with psycopg.connect(url) as first, psycopg.connect(url, autocommit=True) as second:
            seen["first_fold"] = _fold(first)  # its transaction stays open
            seen["second_fold_meanwhile"] = _fold(second)
            first.commit()
            seen["second_fold_after"] = _fold(second)
        seen["after_fold"] = _status(conn, nodes["child"])
        seen["events_after"] = _events(conn)
        listener.execute("SELECT 1")
        seen["woken"] = sum(1 for n in listener.notifies(timeout=0.2) if n.payload == str(q1_id))
        seen["claimed"] = [j for j, _ in _claim(conn, q1_id, worker)]
        seen["claimed_again"] = _claim(conn, q1_id, worker)
        seen["child"] = nodes["child"]
    return seen


def test_two_parents_completed_at_once_on_two_nodes_release_the_child_exactly_once(
    citus_cluster: CitusCluster, cluster_url: str
) -> None:
    seen = settle_two_parents_at_once(citus_cluster, cluster_url)
    # Settling wrote one row each on the parents' own shards, and told the child nothing.
    assert seen["before_fold"] == ("waiting", 2)
    assert seen["events_before"] == 2
    # The first fold took both; the second, meanwhile and after, found nothing to fold.
    assert seen["first_fold"] == 2
    assert seen["second_fold_meanwhile"] == 0
    assert seen["second_fold_after"] == 0
    assert seen["after_fold"] == ("queued", 0)
    assert seen["events_after"] == 0
    assert seen["woken"] == 1
    assert seen["claimed"] == [seen["child"]]
    assert seen["claimed_again"] == []


def test_a_fan_in_of_sixty_parents_on_both_nodes_releases_its_child_once_after_the_last(
    citus_cluster: CitusCluster, cluster_url: str, conn: Conn
) -> None:
    """60 parents over four queues (two a node) -> one child. Four sessions complete 59 of
    them, five a call, while a scheduler ticks every 50 ms: once every settlement is folded
    the child still waits for one parent. The last completion releases it."""
    queues = spread_queues(citus_cluster, conn, 5)
    parents = [_node(f"p{n}", queues[n % 4][0]) for n in range(60)]
    _, nodes = _enqueue(
        conn,
        {"nodes": [*parents, _node("child", queues[4][0], *(p["key"] for p in parents))]},
    )
    worker = _worker(conn, queues)
    held = {queue: _claim(conn, queue, worker) for _, queue in queues[:4]}
    last_queue = queues[59 % 4][1]
    last = next(h for h in held[last_queue] if h[0] == nodes["p59"])
    held[last_queue].remove(last)
    errors: list[BaseException] = []

    def complete(queue: int) -> None:
        try:
            with psycopg.connect(cluster_url, autocommit=True) as own:
                jobs = held[queue]
                for n in range(0, len(jobs), 5):
                    _complete(own, queue, jobs[n : n + 5])
        except BaseException as exc:  # reported below
            errors.append(exc)

    with Ticker(cluster_url, interval=0.05) as ticker:
        threads = [threading.Thread(target=complete, args=(q,)) for _, q in queues[:4]]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert errors == []
        wait_until(lambda: _events(conn) == 0, timeout=30, what="59 settlements folded")
        assert _status(conn, nodes["child"]) == ("waiting", 1)
        _complete(conn, last_queue, [last])
        wait_until(
            lambda: _status(conn, nodes["child"])[0] == "queued",
            timeout=30,
            what="the child released",
        )
    assert ticker.errors == []
    assert _status(conn, nodes["child"]) == ("queued", 0)
    assert one(conn, "SELECT count(*) FROM codity.job_deps WHERE resolved = 'completed'") == 60
    assert _events(conn) == 0
    assert [j for j, _ in _claim(conn, queues[4][1], worker)] == [nodes["child"]]


def test_a_fold_killed_before_its_commit_leaves_the_settlement_for_the_next_tick(
    citus_cluster: CitusCluster, cluster_url: str, conn: Conn
) -> None:
    """p (node 1) -> c (node 2). The completion resent (its COMMIT's answer lost) leaves no
    second row. A fold whose session is terminated before its COMMIT changes nothing; the
    next tick folds the settlement, once."""
    (q1, q1_id), (q2, _) = queues = spread_queues(citus_cluster, conn, 2)
    worker = _worker(conn, queues)
    _, nodes = _enqueue(conn, {"nodes": [_node("p", q1), _node("c", q2, "p")]})
    held = _claim(conn, q1_id, worker)
    _complete(conn, q1_id, held)
    again = conn.execute(COMPLETE, [q1_id, [held[0][0]], [held[0][1]], [Jsonb({})]]).fetchall()
    assert [outcome for _, outcome in again] == ["already_applied"]
    assert _events(conn) == 1
    with psycopg.connect(cluster_url) as doomed:
        assert _fold(doomed) == 1  # its transaction stays open
        conn.execute("SELECT pg_terminate_backend(%s::integer)", [doomed.info.backend_pid])
        with pytest.raises(psycopg.OperationalError):
            doomed.execute("SELECT 1")
    assert _events(conn) == 1
    assert _status(conn, nodes["c"]) == ("waiting", 1)
    _tick(conn)
    assert _events(conn) == 0
    assert _status(conn, nodes["c"]) == ("queued", 0)
    _tick(conn)
    assert _status(conn, nodes["c"]) == ("queued", 0)


# -- batches --------------------------------------------------------------------------------------


def test_a_batch_across_the_nodes_runs_its_callbacks_and_they_read_the_members(
    citus_cluster: CitusCluster, conn: Conn
) -> None:
    """Six members on two nodes, one dead-lettered: after the fold any_dead and all_done run,
    all_succeeded is cancelled, and all_done reads every member's outcome and result. Then an
    open batch: members added and completed before the seal, whose callback waits for it."""
    (qa, qa_id), (qb, qb_id) = queues = spread_queues(citus_cluster, conn, 2)
    worker = _worker(conn, queues)
    rows = conn.execute(
        "SELECT job_id, callback FROM codity.create_batch(%s)",
        [
            Jsonb(
                {
                    "jobs": [{"queue": (qa, qb)[n % 2], "task": "m"} for n in range(6)],
                    "callbacks": {
                        "all_done": {"queue": qb, "task": "cb"},
                        "all_succeeded": {"queue": qa, "task": "cb"},
                        "any_dead": {"queue": qa, "task": "cb"},
                    },
                }
            )
        ],
    ).fetchall()
    members = [job for job, callback in rows if callback is None]
    callbacks = {callback: job for job, callback in rows if callback}
    for queue in (qa_id, qb_id):
        held = _claim(conn, queue, worker)
        dead = [h for h in held if h[0] == members[0]]
        _complete(conn, queue, [h for h in held if h not in dead])
        for job, fence in dead:
            conn.execute(FAIL_DEAD, [queue, job, fence])
    assert {k: _status(conn, j)[0] for k, j in callbacks.items()} == dict.fromkeys(
        callbacks, "waiting"
    )
    _tick(conn)
    assert {k: _status(conn, j)[0] for k, j in callbacks.items()} == {
        "all_done": "queued",
        "all_succeeded": "cancelled",
        "any_dead": "queued",
    }
    ((job, fence),) = _claim(conn, qb_id, worker)
    assert job == callbacks["all_done"]
    outcomes = conn.execute(
        "SELECT job_id, outcome, result FROM codity.dep_results(%s, %s, %s) ORDER BY job_id",
        [qb_id, job, fence],
    ).fetchall()
    assert outcomes == sorted(
        (m, "dead_letter", None) if m == members[0] else (m, "completed", {"from": m})
        for m in members
    )

    # An open batch: grown on both nodes, every member done before the seal.
    rows = conn.execute(
        "SELECT batch_id, job_id, callback FROM codity.create_batch(%s)",
        [Jsonb({"open": True, "jobs": [{"queue": qa, "task": "m"}],
                "callbacks": {"all_done": {"queue": qb, "task": "cb"}}})],
    ).fetchall()  # fmt: skip
    batch = rows[0][0]
    (callback,) = [job for _, job, name in rows if name]
    conn.execute(
        "SELECT * FROM codity.add_to_batch(%s, %s)", [batch, Jsonb([{"queue": qb, "task": "m"}])]
    )
    for queue in (qa_id, qb_id):
        _complete(conn, queue, _claim(conn, queue, worker))
    _tick(conn)
    assert _status(conn, callback) == ("waiting", 1)  # the seal
    conn.execute("SELECT * FROM codity.seal_batch(%s)", [batch])
    assert _status(conn, callback) == ("queued", 0)
    assert _events(conn) == 0


# -- failures and the operators' actions ---------------------------------------------------------


def test_held_and_cancelled_branches_then_retry_workflow_skip_node_and_cancel_workflow(
    citus_cluster: CitusCluster, conn: Conn
) -> None:
    """extract (node 1) -> load (node 2, edge 'hold') and audit (node 2) -> report (node 1).
    extract dead-lettered: load held, audit and report cancelled across the nodes. Then
    retry_workflow runs the branch again; skip_node and retry_job act on a node whose
    settlement is still unfolded, and fold it first; cancel_workflow stops the rest."""
    (q1, q1_id), (q2, q2_id) = queues = spread_queues(citus_cluster, conn, 2)
    worker = _worker(conn, queues)
    workflow, nodes = _enqueue(
        conn,
        {
            "nodes": [
                _node("extract", q1),
                _node("load", q2, {"key": "extract", "on_failure": "hold"}),
                _node("audit", q2, "extract"),
                _node("report", q1, "audit"),
            ]
        },
    )
    _dead(conn, q1_id, worker, nodes["extract"])
    assert _statuses(conn, workflow)["audit"] == "waiting"  # not folded yet
    _tick(conn)
    assert _statuses(conn, workflow) == {
        "extract": "dead_letter", "load": "waiting", "audit": "cancelled", "report": "cancelled",
    }  # fmt: skip
    assert _status(conn, nodes["load"]) == ("waiting", 1)

    # retry_workflow: the failed nodes run again, the children wait for them again.
    retried = conn.execute(
        "SELECT node_key, job_status::text FROM codity.retry_workflow(%s)", [workflow]
    ).fetchall()
    assert sorted(retried) == [("audit", "waiting"), ("extract", "queued"), ("report", "waiting")]
    _run_one(conn, q1_id, worker, nodes["extract"])
    _tick(conn)
    assert _statuses(conn, workflow)["load"] == "queued"
    assert _statuses(conn, workflow)["audit"] == "queued"
    _complete(conn, q2_id, _claim(conn, q2_id, worker))
    _tick(conn)
    _run_one(conn, q1_id, worker, nodes["report"])
    _tick(conn)
    assert _statuses(conn, workflow) == dict.fromkeys(nodes, "completed")
    assert _events(conn) == 0

    # skip_node on a dead node whose settlement the tick has not folded: folded first (its
    # 'cancel' child cancelled), then the skip brings that child back and releases both.
    wf2, n2 = _enqueue(
        conn,
        {
            "nodes": [
                _node("a", q1),
                _node("b", q2, {"key": "a", "on_failure": "hold"}),
                _node("c", q2, "a"),
            ]
        },
    )
    _dead(conn, q1_id, worker, n2["a"])
    assert _events(conn) == 1
    skipped = conn.execute(
        "SELECT previous_status::text, job_status::text FROM codity.skip_node(%s, 'a')", [wf2]
    ).fetchall()
    assert skipped == [("dead_letter", "completed")]
    assert _events(conn) == 0
    assert _statuses(conn, wf2) == {"a": "completed", "b": "queued", "c": "queued"}
    assert one(conn, "SELECT resolved FROM codity.job_deps WHERE child_id = %s", [n2["c"]]) == (
        "skipped"
    )

    # retry_job of a dead node whose settlement is unfolded: folded first, as one server
    # would have done at once ('cancel' child cancelled, 'hold' child waits for the rerun).
    seen = retry_a_dead_node_before_the_tick(conn, queues, worker)
    assert seen["events_after_retry"] == 0
    assert seen["after_retry"] == {"a": "queued", "b": "waiting", "c": "cancelled"}
    assert seen["after_rerun"] == {"a": "completed", "b": "queued", "c": "cancelled"}

    # cancel_workflow with a node running on one node and its child waiting on the other.
    wf4, n4 = _enqueue(conn, {"nodes": [_node("a", q1), _node("b", q2, "a")]})
    ((job, fence),) = _claim(conn, q1_id, worker)
    assert job == n4["a"]
    cancelled = conn.execute(
        "SELECT node_key, previous_status::text FROM codity.cancel_workflow(%s)", [wf4]
    ).fetchall()
    assert sorted(cancelled) == [("a", "running"), ("b", "waiting")]
    rows = conn.execute(COMPLETE, [q1_id, [job], [fence], [Jsonb({})]]).fetchall()
    assert rows[0][1] != "applied"
    _tick(conn)
    assert _statuses(conn, wf4) == {"a": "cancelled", "b": "cancelled"}
    assert _events(conn) == 0


def retry_a_dead_node_before_the_tick(
    conn: Conn, queues: list[tuple[str, int]], worker: int
) -> dict[str, Any]:
    """a (node 1) -> b (node 2, edge 'hold') and c (node 2): a dead-lettered, then retried
    with retry_job before any tick folded its settlement; a tick; a runs again; a tick.
    Returns the nodes' states after the retry and after the rerun."""
    (q1, q1_id), (q2, _) = queues[:2]
    workflow, nodes = _enqueue(
        conn,
        {
            "nodes": [
                _node("a", q1),
                _node("b", q2, {"key": "a", "on_failure": "hold"}),
                _node("c", q2, "a"),
            ]
        },
    )
    _dead(conn, q1_id, worker, nodes["a"])
    conn.execute("SELECT * FROM codity.retry_job(%s)", [nodes["a"]])
    seen: dict[str, Any] = {
        "events_after_retry": _events(conn),
        "after_retry": _statuses(conn, workflow),
    }
    _tick(conn)  # folds what the retry left, if anything
    _run_one(conn, q1_id, worker, nodes["a"])
    _tick(conn)
    seen["after_rerun"] = _statuses(conn, workflow)
    return seen


# -- latency ---------------------------------------------------------------------------------------


def test_latency_from_the_last_parents_completion_to_the_childs_release(
    citus_cluster: CitusCluster, cluster_url: str, conn: Conn
) -> None:
    """20 times: a parent on node 1 completed through its body, its child on node 2 waited
    for by polling the coordinator every millisecond, with a scheduler ticking every 200 ms
    (SCHEDULER_TICK_MS=200; the default is 1 s). The release comes with the next tick."""
    (q1, q1_id), (q2, _) = queues = spread_queues(citus_cluster, conn, 2)
    worker = _worker(conn, queues)
    latencies = []
    with Ticker(cluster_url, interval=0.2) as ticker:
        for _ in range(20):
            _, nodes = _enqueue(conn, {"nodes": [_node("p", q1), _node("c", q2, "p")]})
            held = _claim(conn, q1_id, worker)
            _complete(conn, q1_id, held)
            began = time.monotonic()
            child = nodes["c"]

            def released(child: int = child) -> bool:
                return _status(conn, child)[0] == "queued"

            wait_until(released, timeout=10, what="the child released", interval=0.001)
            latencies.append(time.monotonic() - began)
    assert ticker.errors == []
    ms = sorted(x * 1000 for x in latencies)
    # What one tick costs on this cluster, with nothing to fold and with one settlement.
    ticks = []
    for _ in range(10):
        began = time.monotonic()
        _tick(conn)
        ticks.append((time.monotonic() - began) * 1000)
    print(
        f"\nlast parent's completion -> child queued, tick every 200 ms, 20 runs:"
        f" median {statistics.median(ms):.0f} ms, p90 {ms[17]:.0f} ms, max {ms[-1]:.0f} ms,"
        f" min {ms[0]:.0f} ms; one tick alone: median {statistics.median(ticks):.0f} ms"
    )
    assert ms[-1] < 2000


# -- break it -----------------------------------------------------------------------------------


def test_a_fold_that_keeps_its_rows_is_seen_folding_twice(
    citus_cluster: CitusCluster, citus_db_url: str
) -> None:
    """The detector of the two-parents test, with fold_keeps_events injected: the second
    fold folds both settlements again and the rows stay."""
    _inject(citus_db_url, "fold_keeps_events")
    seen = settle_two_parents_at_once(citus_cluster, citus_db_url)
    assert seen["first_fold"] == 2
    assert seen["second_fold_after"] == 2  # folded twice
    assert seen["events_after"] == 2


def test_a_tick_that_does_not_fold_strands_the_child(
    citus_cluster: CitusCluster, citus_db_url: str
) -> None:
    """With no_fold injected, the child of a completed parent waits through ticks."""
    _inject(citus_db_url, "no_fold")
    with psycopg.connect(citus_db_url, autocommit=True) as conn:
        (q1, q1_id), (q2, _) = queues = spread_queues(citus_cluster, conn, 2)
        worker = _worker(conn, queues)
        _, nodes = _enqueue(conn, {"nodes": [_node("p", q1), _node("c", q2, "p")]})
        _run_one(conn, q1_id, worker, nodes["p"])
        for _ in range(3):
            _tick(conn)
        assert _status(conn, nodes["c"]) == ("waiting", 1)
        assert _events(conn) == 1


def test_an_operator_that_does_not_fold_first_strands_the_held_child(
    citus_cluster: CitusCluster, citus_db_url: str
) -> None:
    """With no_fold_first injected, retry_job leaves the dead node's settlement to the tick,
    which folds it after the node runs again: the 'hold' edge is closed as dead_letter, and
    the rerun's completion has nothing left to release its child with."""
    _inject(citus_db_url, "no_fold_first")
    with psycopg.connect(citus_db_url, autocommit=True) as conn:
        queues = spread_queues(citus_cluster, conn, 2)
        seen = retry_a_dead_node_before_the_tick(conn, queues, _worker(conn, queues))
    assert seen["events_after_retry"] == 1
    assert seen["after_rerun"] == {"a": "completed", "b": "waiting", "c": "cancelled"}
