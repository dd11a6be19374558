"""`codity status` on a Citus cluster: the operator's first look reads every node's queues
and the jobs each worker holds there, through the coordinator.

It reads queue_overview, worker_overview and schedule_overview and codity.health(); the
worker view counted held jobs with a subquery per worker, correlated from a reference table
into the jobs, which Citus refuses (migration 0033). Break it: put that subquery back
(migration 0006's definition of the view) and the command exits 1 with Citus's
"correlated subqueries are not supported".
"""

from __future__ import annotations

import json
import os
import subprocess

import psycopg
import pytest

from tests.citus import CitusCluster
from tests.processes import CODITY
from tests.sqlapi import create_queue, enqueue_many_call, one

pytestmark = pytest.mark.citus


def test_status_shows_every_nodes_queues_and_the_jobs_a_worker_holds_there(
    citus_cluster: CitusCluster, citus_db_url: str
) -> None:
    with psycopg.connect(citus_db_url, autocommit=True) as conn:
        database = citus_db_url.rsplit("/", 1)[1]
        queues: dict[str, int] = {}
        nodes: set[int] = set()
        while len(queues) < 4 or len(nodes) < 2:  # queue ids hash onto the nodes
            assert len(queues) < 20, f"20 queues and all on one node: {queues}"
            name = f"st-{len(queues)}"
            queues[name] = create_queue(conn, name)
            nodes.add(citus_cluster.node_port_of(database, "codity.jobs", queues[name]))
        for name in queues:
            conn.execute(*enqueue_many_call(name, [{"task": "t"}] * 3))
        worker = one(conn, "SELECT codity.register_worker('status', %s)", [list(queues)])
        for queue in queues.values():
            conn.execute(
                "SELECT * FROM codity.claim_in_queue(%s, %s, 2, true, p_start => true)",
                [queue, worker],
            ).fetchall()

    result = subprocess.run(
        [*CODITY, "status", "--json"],
        env=dict(os.environ, DATABASE_URL=citus_db_url),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    status = json.loads(result.stdout)
    by_queue = {q["queue"]: q for q in status["queues"]}
    for name in queues:
        assert (by_queue[name]["claimable"], by_queue[name]["running"]) == (1, 2), by_queue[name]
    (held,) = [w["jobs_held"] for w in status["workers"] if w["worker_id"] == worker]
    assert held == 2 * len(queues), "two jobs of each queue, on both nodes"
