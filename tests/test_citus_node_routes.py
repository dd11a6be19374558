"""On a real Citus cluster, a worker sends each queue's calls to the node that holds it
(codity.worker.node_routes), and through the coordinator when told to.

A ``codity worker`` drains quick jobs in two queues, one on each worker node, and is then
left holding a long job in each. Meanwhile, each worker node's ``pg_stat_activity`` is read
for the worker's own sessions (application_name ``codity-worker``; Citus's connections from
the coordinator name themselves ``citus_internal``): with the routes, each node has them,
and what they last ran is a by-queue call of the worker's (a claim or a completion
batch); with ``WORKER_THROUGH_COORDINATOR=1`` no node has any, and the same drain still
completes every job. Either way the NOTIFYs stay on the coordinator, where the worker
listens: the long jobs, enqueued through the coordinator, are picked up at once.

Break it: ``NodeRoutes.update`` ignoring its rows leaves the nodes without the worker's
sessions, and the routed case fails; the flag not reaching the worker fails the other.
(tests/test_citus_shard_move.py follows the routes through a real move of a queue's shards.)
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.citus import CitusCluster
from tests.processes import FAST, Processes, wait_until
from tests.sqlapi import create_queue, enqueue_many_call, one

pytestmark = pytest.mark.citus

Conn = psycopg.Connection[Any]
_SESSIONS = """
SELECT query FROM pg_catalog.pg_stat_activity
WHERE application_name = 'codity-worker' AND datname = current_database()
"""


@pytest.fixture
def conn(citus_db_url: str) -> Iterator[Conn]:
    with psycopg.connect(citus_db_url, autocommit=True) as connection:
        yield connection


def _queue_per_node(cluster: CitusCluster, conn: Conn) -> dict[int, str]:
    """Queues ``routed-0``, ``routed-1``, ... until each worker node holds one: {port: name}."""
    by_node: dict[int, str] = {}
    for n in range(20):
        name = f"routed-{n}"
        queue = create_queue(conn, name)
        by_node.setdefault(cluster.node_port_of(conn.info.dbname, "codity.jobs", queue), name)
        if len(by_node) == len(cluster.workers):
            return by_node
    raise AssertionError(f"20 queues and still not one on each worker node: {by_node}")


def _worker_sessions(cluster: CitusCluster, database: str) -> dict[int, list[str]]:
    """The worker process's sessions on each worker node: {port: the last query of each}."""
    found = {}
    for node in cluster.workers:
        with psycopg.connect(node.url(database), autocommit=True) as c:
            found[node.port] = [str(q) for (q,) in c.execute(_SESSIONS).fetchall()]
    return found


@pytest.mark.parametrize("routed", [True, False], ids=["to the nodes", "through the coordinator"])
def test_a_worker_calls_each_queues_node_unless_told_to_go_through_the_coordinator(
    citus_cluster: CitusCluster, citus_db_url: str, conn: Conn, tmp_path: Path, routed: bool
) -> None:
    database = conn.info.dbname
    by_node = _queue_per_node(citus_cluster, conn)
    for name in by_node.values():
        conn.execute(
            *enqueue_many_call(name, [{"task": "fault.sleep", "payload": {"seconds": 0}}] * 50)
        )
    settings = dict(FAST, WORKER_POLL_INTERVAL_MS="60000")  # no poll: only NOTIFY wakes it
    if not routed:
        settings["WORKER_THROUGH_COORDINATOR"] = "1"
    with Processes(tmp_path, citus_db_url, **settings) as procs:
        args = ["worker", "--app", "tests.fault_tasks:registry", "--concurrency", "5"]
        worker = procs.start(
            "worker", [*args, *(a for n in by_node.values() for a in ("--queue", n))]
        )
        done = "SELECT count(*) FROM codity.jobs WHERE status = 'completed'"
        wait_until(lambda: one(conn, done) == 100, timeout=60, what="100 jobs done",
                   alive=[worker])  # fmt: skip
        for name in by_node.values():
            conn.execute(
                *enqueue_many_call(name, [{"task": "fault.sleep", "payload": {"seconds": 60}}])
            )
        running = "SELECT count(*) FROM codity.jobs WHERE status = 'running'"
        wait_until(lambda: one(conn, running) == 2, timeout=10, what="both long jobs running",
                   alive=[worker])  # fmt: skip
        sessions = _worker_sessions(citus_cluster, database)
        worker.send(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0
        log = worker.log_path.read_text(errors="replace")

    if routed:
        for port, queries in sessions.items():
            assert queries, f"no session of the worker's on the node at {port}"
            assert any("_in_queue(" in q for q in queries), (port, queries)
            assert f":{port}" in log  # "the calls of queue(s) ... go to the node ..."
    else:
        assert sessions == {node.port: [] for node in citus_cluster.workers}
        assert "go to the node" not in log
    assert one(conn, "SELECT count(*) FROM codity.jobs WHERE status = 'queued'") == 2  # released
