"""What an operator does to a workflow, and the edge policies beyond cancel and ignore.

Issue 27. Proven here on a real server:

- ``hold``: a failed parent leaves the child waiting, its count unchanged; retrying the
  parent (replay of its dead letter, or retry_workflow) or skipping it lets the child run;
- ``run``: the child runs when a watched parent is dead-lettered, and is cancelled when all
  settle otherwise;
- retry_workflow: ``failed`` runs the dead-lettered and cancelled nodes again, completed
  ones keep their results; ``failed_and_downstream`` re-runs what ran after them too; ``all``
  everything, and only once nothing is unfinished; the fence keeps growing, and a child
  reads its parent's latest result;
- skip_node: a node marked done without running; the children a failed node cancelled come
  back; the children read the outcome 'skipped';
- cancel_workflow: every unfinished node cancelled, a running one's execution closed and
  its worker's late completion refused by the fence; a repeat cancels nothing more;
- bad requests: one clear error each (CD008, CD003, CD010, CD020), nothing written.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.sqlapi import create_queue, make_project, one, row, table_snapshot


def _enqueue(conn: psycopg.Connection, spec: dict[str, Any]) -> tuple[int, dict[str, int]]:
    """The workflow's id and its nodes' job ids by key."""
    rows = conn.execute(
        "SELECT workflow_id, node_key, job_id FROM codity.enqueue_workflow(%s)", [Jsonb(spec)]
    ).fetchall()
    return rows[0][0], {key: job for _, key, job in rows}


def _node(key: str, *after: Any, queue: str = "wf") -> dict[str, Any]:
    node: dict[str, Any] = {"key": key, "queue": queue, "task": "t", "payload": {"key": key}}
    if after:
        node["after"] = list(after)
    return node


def _states(conn: psycopg.Connection, nodes: dict[str, int]) -> dict[str, str]:
    by_id: dict[int, str] = dict(
        conn.execute(
            "SELECT id, status::text FROM codity.jobs WHERE id = ANY(%s)", [list(nodes.values())]
        ).fetchall()
    )
    return {key: by_id[job] for key, job in nodes.items()}


class Runner:
    """Claims and settles the workflow's jobs by node key, as a worker would."""

    def __init__(self, conn: psycopg.Connection, queues: tuple[str, ...] = ("wf",)) -> None:
        self.conn = conn
        self.queues = queues
        (self.worker,) = row(conn, "SELECT codity.register_worker('w', %s)", [list(queues)])

    def claim(self) -> dict[int, int]:
        """Every claimable job of the queues, started: fence by job id."""
        held: dict[int, int] = {}
        for queue in self.queues:
            held.update(
                self.conn.execute(
                    "SELECT job_id, fence FROM codity.claim(%s, %s, 100, p_start => true)",
                    [self.worker, queue],
                ).fetchall()
            )
        return held

    def settle(self, nodes: dict[str, int], fail: frozenset[str] = frozenset()) -> list[str]:
        """Run every claimable node: completed with {"from": key}, or dead-lettered when its
        key is in ``fail``. Returns the keys run, in order."""
        key_of = {job: key for key, job in nodes.items()}
        ran: list[str] = []
        for job, fence in sorted(self.claim().items()):
            key = key_of[job]
            if key in fail:
                self.conn.execute(
                    "SELECT * FROM codity.fail(%s, %s, 'boom', p_retryable => false)", [job, fence]
                )
            else:
                self.conn.execute(
                    "SELECT * FROM codity.complete(%s, %s, %s)", [job, fence, Jsonb({"from": key})]
                )
            ran.append(key)
        return ran

    def drain(self, nodes: dict[str, int], fail: frozenset[str] = frozenset()) -> list[str]:
        ran: list[str] = []
        while batch := self.settle(nodes, fail):
            ran += batch
        return ran


def test_hold_keeps_the_child_waiting_until_the_parent_is_replayed(
    conn: psycopg.Connection,
) -> None:
    """a -hold-> b: a dead-lettered a leaves b waiting with a in its count; replaying a's dead
    letter (retry_job) reopens the edge, and a's completion then releases b. Break it: drop
    the call to _reopen_held in replay_dead_letter and b waits forever."""
    create_queue(conn, "wf", max_attempts=1)
    _, nodes = _enqueue(conn, {"on_failure": "hold", "nodes": [_node("a"), _node("b", "a")]})
    runner = Runner(conn)
    assert runner.settle(nodes, fail=frozenset({"a"})) == ["a"]
    assert _states(conn, nodes) == {"a": "dead_letter", "b": "waiting"}
    assert one(conn, "SELECT deps_remaining FROM codity.jobs WHERE id = %s", [nodes["b"]]) == 1
    conn.execute("SELECT * FROM codity.retry_job(%s)", [nodes["a"]])
    assert runner.drain(nodes) == ["a", "b"]
    assert _states(conn, nodes) == {"a": "completed", "b": "completed"}


def test_a_run_node_runs_when_a_watched_parent_dies_and_is_cancelled_otherwise(
    conn: psycopg.Connection,
) -> None:
    create_queue(conn, "wf", max_attempts=1)
    create_queue(conn, "slow")
    watch = [{"key": "a", "on_failure": "run"}, {"key": "b", "on_failure": "run"}]
    _, dies = _enqueue(
        conn, {"nodes": [_node("a"), _node("b", queue="slow"), _node("alarm", *watch)]}
    )
    runner = Runner(conn)
    assert runner.settle(dies, fail=frozenset({"a"})) == ["a"]
    assert _states(conn, dies) == {"a": "dead_letter", "b": "queued", "alarm": "queued"}
    assert runner.settle(dies) == ["alarm"]
    assert Runner(conn, ("slow",)).settle(dies) == ["b"]
    assert _states(conn, dies)["alarm"] == "completed"  # b's completion found it done

    _, lives = _enqueue(
        conn, {"nodes": [_node("x"), _node("alarm", {"key": "x", "on_failure": "run"})]}
    )
    assert runner.drain(lives) == ["x"]
    assert _states(conn, lives) == {"x": "completed", "alarm": "cancelled"}
    assert one(conn, "SELECT last_error FROM codity.jobs WHERE id = %s", [lives["alarm"]]) == (
        "cancelled: no job it watches was dead-lettered"
    )


def _diamond(conn: psycopg.Connection) -> tuple[int, dict[str, int]]:
    """a -> (b, c) -> d, and c -ignore-> e: run with c dead-lettered."""
    create_queue(conn, "wf", max_attempts=1)
    workflow, nodes = _enqueue(
        conn,
        {
            "nodes": [
                _node("a"),
                _node("b", "a"),
                _node("c", "a"),
                _node("d", "b", "c"),
                _node("e", {"key": "c", "on_failure": "ignore"}),
            ]
        },
    )
    Runner(conn).drain(nodes, fail=frozenset({"c"}))
    assert _states(conn, nodes) == {
        "a": "completed", "b": "completed", "c": "dead_letter", "d": "cancelled", "e": "completed",
    }  # fmt: skip
    return workflow, nodes


def _retry(conn: psycopg.Connection, workflow: int, mode: str) -> dict[int, tuple[str, str]]:
    return {
        job: (previous, status)
        for job, previous, status in conn.execute(
            "SELECT job_id, previous_status::text, job_status::text"
            " FROM codity.retry_workflow(%s, %s)",
            [workflow, mode],
        ).fetchall()
    }


def test_retry_failed_runs_the_failed_branch_again_and_keeps_what_completed(
    conn: psycopg.Connection,
) -> None:
    workflow, nodes = _diamond(conn)
    dead = one(conn, "SELECT id FROM codity.dead_letters WHERE job_id = %s", [nodes["c"]])
    fence = one(conn, "SELECT execution_seq FROM codity.jobs WHERE id = %s", [nodes["c"]])
    assert _retry(conn, workflow, "failed") == {
        nodes["c"]: ("dead_letter", "queued"),
        nodes["d"]: ("cancelled", "waiting"),
    }
    assert one(conn, "SELECT deps_remaining FROM codity.jobs WHERE id = %s", [nodes["d"]]) == 1
    assert (
        one(conn, "SELECT replayed_job_id FROM codity.dead_letters WHERE id = %s", [dead])
        == (nodes["c"])
    )
    assert Runner(conn).drain(nodes) == ["c", "d"]
    assert set(_states(conn, nodes).values()) == {"completed"}
    # The fence only grows: c's second run holds a newer one than its first.
    assert one(conn, "SELECT execution_seq FROM codity.jobs WHERE id = %s", [nodes["c"]]) > fence
    assert _retry(conn, workflow, "failed") == {}


def test_retry_failed_and_downstream_reruns_what_ran_without_the_failed_parent(
    conn: psycopg.Connection,
) -> None:
    """e completed on an 'ignore' edge without c's result: it runs again, after c."""
    workflow, nodes = _diamond(conn)
    assert set(_retry(conn, workflow, "failed_and_downstream")) == {
        nodes["c"], nodes["d"], nodes["e"],
    }  # fmt: skip
    assert _states(conn, nodes) == {
        "a": "completed", "b": "completed", "c": "queued", "d": "waiting", "e": "waiting",
    }  # fmt: skip
    assert Runner(conn).drain(nodes) == ["c", "d", "e"]


def test_retry_all_runs_everything_from_the_roots_and_children_read_the_latest_result(
    conn: psycopg.Connection,
) -> None:
    create_queue(conn, "wf")
    workflow, nodes = _enqueue(conn, {"nodes": [_node("a"), _node("b", "a")]})
    runner = Runner(conn)
    runner.drain(nodes)
    assert _retry(conn, workflow, "all") == {
        nodes["a"]: ("completed", "queued"),
        nodes["b"]: ("completed", "waiting"),
    }
    assert runner.settle(nodes) == ["a"]
    [(job, fence)] = runner.claim().items()
    assert job == nodes["b"]
    results = conn.execute(
        "SELECT node_key, outcome, result FROM codity.dep_results(%s, %s, %s)",
        [one(conn, "SELECT queue_id FROM codity.jobs WHERE id = %s", [job]), job, fence],
    ).fetchall()
    assert results == [("a", "completed", {"from": "a"})]  # one row: the latest run's
    assert (
        one(conn, "SELECT count(*) FROM codity.job_executions WHERE job_id = %s", [nodes["a"]]) == 2
    )


def test_retry_all_is_refused_while_a_node_is_unfinished(conn: psycopg.Connection) -> None:
    create_queue(conn, "wf")
    workflow, nodes = _enqueue(conn, {"nodes": [_node("a"), _node("b", "a")]})
    before = table_snapshot(conn)
    with pytest.raises(psycopg.Error) as caught:
        conn.execute("SELECT * FROM codity.retry_workflow(%s, 'all')", [workflow])
    assert caught.value.sqlstate == "CD020"
    assert f"node a (job {nodes['a']}) of workflow {workflow} is queued" in str(caught.value)
    assert table_snapshot(conn) == before


def test_skip_a_failed_node_brings_back_what_it_cancelled(conn: psycopg.Connection) -> None:
    """c dead-lettered cancelled d; skipping c makes d wait only for b's... already completed:
    d runs, and reads that c was skipped."""
    workflow, nodes = _diamond(conn)
    skipped = conn.execute(
        "SELECT job_id, previous_status::text, job_status::text FROM codity.skip_node(%s, 'c')",
        [workflow],
    ).fetchall()
    assert skipped == [(nodes["c"], "dead_letter", "completed")]
    assert _states(conn, nodes)["d"] == "queued"
    runner = Runner(conn)
    [(job, fence)] = runner.claim().items()
    assert job == nodes["d"]
    outcomes = conn.execute(
        "SELECT node_key, outcome, result FROM codity.dep_results(%s, %s, %s)",
        [one(conn, "SELECT queue_id FROM codity.jobs WHERE id = %s", [job]), job, fence],
    ).fetchall()
    assert outcomes == [("b", "completed", {"from": "b"}), ("c", "skipped", None)]
    assert one(conn, "SELECT last_error FROM codity.jobs WHERE id = %s", [nodes["c"]]) == (
        "skipped by an operator (it was dead_letter)"
    )


def test_skip_a_held_node_lets_the_graph_run_on(conn: psycopg.Connection) -> None:
    """a -hold-> b -> c: a dies, b is held; skipping b runs c, and a stays dead."""
    create_queue(conn, "wf", max_attempts=1)
    workflow, nodes = _enqueue(
        conn,
        {"nodes": [_node("a"), _node("b", {"key": "a", "on_failure": "hold"}), _node("c", "b")]},
    )
    runner = Runner(conn)
    runner.drain(nodes, fail=frozenset({"a"}))
    assert _states(conn, nodes) == {"a": "dead_letter", "b": "waiting", "c": "waiting"}
    conn.execute("SELECT * FROM codity.skip_node(%s, 'b')", [workflow])
    assert runner.drain(nodes) == ["c"]
    assert _states(conn, nodes) == {"a": "dead_letter", "b": "completed", "c": "completed"}


def test_skipping_one_of_two_holding_parents_leaves_the_child_held_by_the_other(
    conn: psycopg.Connection,
) -> None:
    """a and b both hold c and both die: skipping a must leave c waiting for b. Break it:
    recount c without the held edges (_reset_nodes) and c runs behind a dead parent."""
    create_queue(conn, "wf", max_attempts=1)
    workflow, nodes = _enqueue(
        conn, {"on_failure": "hold", "nodes": [_node("a"), _node("b"), _node("c", "a", "b")]}
    )
    runner = Runner(conn)
    runner.drain(nodes, fail=frozenset({"a", "b"}))
    conn.execute("SELECT * FROM codity.skip_node(%s, 'a')", [workflow])
    assert _states(conn, nodes) == {"a": "completed", "b": "dead_letter", "c": "waiting"}
    assert one(conn, "SELECT deps_remaining FROM codity.jobs WHERE id = %s", [nodes["c"]]) == 1
    conn.execute("SELECT * FROM codity.skip_node(%s, 'b')", [workflow])
    assert runner.drain(nodes) == ["c"]


def test_cancel_workflow_stops_every_unfinished_node_and_fences_out_the_running_one(
    conn: psycopg.Connection,
) -> None:
    create_queue(conn, "wf")
    workflow, nodes = _enqueue(
        conn, {"nodes": [_node("a"), _node("b"), _node("c", "a", "b"), _node("d", "c")]}
    )
    runner = Runner(conn)
    held = runner.claim()
    conn.execute("SELECT * FROM codity.complete(%s, %s)", [nodes["a"], held.pop(nodes["a"])])
    [(running, fence)] = held.items()
    cancelled = conn.execute(
        "SELECT node_key, previous_status::text FROM codity.cancel_workflow(%s)", [workflow]
    ).fetchall()
    assert cancelled == [("b", "running"), ("c", "waiting"), ("d", "waiting")]
    assert _states(conn, nodes) == {
        "a": "completed", "b": "cancelled", "c": "cancelled", "d": "cancelled",
    }  # fmt: skip
    assert (
        one(
            conn,
            "SELECT status::text FROM codity.job_executions WHERE job_id = %s",
            [running],
        )
        == "cancelled"
    )
    late = conn.execute("SELECT * FROM codity.complete(%s, %s)", [running, fence]).fetchall()
    assert _states(conn, nodes)["b"] == "cancelled", late
    assert conn.execute("SELECT * FROM codity.cancel_workflow(%s)", [workflow]).fetchall() == []
    assert one(conn, "SELECT count(*) FROM codity.job_deps WHERE resolved IS NULL") == 0


BAD_CALLS = [
    (
        "unknown workflow",
        "SELECT * FROM codity.cancel_workflow(999999)",
        "CD008",
        "workflow 999999 does not exist",
    ),
    (
        "unknown mode",
        "SELECT * FROM codity.retry_workflow({w}, 'some')",
        "CD010",
        "retry mode must be",
    ),
    ("no such node", "SELECT * FROM codity.skip_node({w}, 'zz')", "CD003", 'has no node "zz"'),
    ("skip a running node", "SELECT * FROM codity.skip_node({w}, 'a')", "CD020", "is running"),
    (
        "a workflow as a batch",
        "SELECT * FROM codity.seal_batch({w})",
        "CD008",
        "batch {w} does not exist",
    ),
]


@pytest.mark.parametrize(
    ("query", "state", "said"), [b[1:] for b in BAD_CALLS], ids=[b[0] for b in BAD_CALLS]
)
def test_bad_requests_are_one_clear_error_and_write_nothing(
    conn: psycopg.Connection, query: str, state: str, said: str
) -> None:
    create_queue(conn, "wf")
    workflow, _ = _enqueue(conn, {"nodes": [_node("a"), _node("b", "a")]})
    Runner(conn).claim()
    before = table_snapshot(conn)
    with pytest.raises(psycopg.Error) as caught:
        conn.execute(query.format(w=workflow))
    assert caught.value.sqlstate == state and said.format(w=workflow) in str(caught.value), (
        caught.value
    )
    assert table_snapshot(conn) == before


def test_another_projects_workflow_reads_as_missing(conn: psycopg.Connection) -> None:
    create_queue(conn, "wf")
    workflow, _ = _enqueue(conn, {"nodes": [_node("a")]})
    _, other = make_project(conn, "other")
    for query in (
        "SELECT * FROM codity.cancel_workflow(%s, %s)",
        "SELECT * FROM codity.retry_workflow(%s, 'failed', %s)",
    ):
        with pytest.raises(psycopg.Error) as caught:
            conn.execute(query, [workflow, other])
        assert caught.value.sqlstate == "CD008"
    assert (
        one(conn, "SELECT status::text FROM codity.jobs WHERE workflow_id = %s", [workflow])
        == "queued"
    )
