"""The worker's hot path on a real Citus 14 cluster: each call goes whole to the node that
holds its queue, and nothing the worker sends on the way fans out over the shards.

- The worker's own statements (imported from codity.worker, not copied) — the claim, the
  completion batch, the failure, the release — and ``extend_leases``, each sent to the
  coordinator with ``citus.log_remote_commands`` on: exactly one remote command, the call
  itself, on the node of the queue; nothing run on the coordinator. For a queue on each of
  the two worker nodes.
- The heartbeat as the worker sends it, over jobs of queues on both nodes: it touches only
  the shards of those queues (``citus.multi_task_query_log_level = 'error'`` refuses any
  statement of it that would run on several shards).
- A real ``codity worker`` whose login refuses every multi-shard statement (the same
  setting, on its role in this database) drains two queues on two nodes through every hot
  call — claims, completion batches, failures with a retry and a dead letter, heartbeats
  while jobs run, and the releases of its drain on SIGTERM — without one refusal.

Break it: the completion statement with the ``WHERE c.outcome <> 'applied'`` it had before
737bbb4 fails the ``complete_many`` case (the body runs on the coordinator: four remote
commands and a two-phase commit); the claim sent through the name wrapper ``codity.claim``
instead of ``claim_in_queue`` fails the ``claim`` case the same way.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg.types.json import Jsonb

from codity.worker.claim import CLAIM_AND_START
from codity.worker.reporter import _FAIL, _HEARTBEAT, _RELEASE, COMPLETE_MANY
from tests.citus import CitusCluster
from tests.processes import Processes, Ticker, wait_until
from tests.sqlapi import NO_BACKOFF, create_queue, enqueue_many_call, one

pytestmark = pytest.mark.citus

Conn = psycopg.Connection[Any]
EXTEND_LEASES = (
    "SELECT job_id, fence, state FROM codity.extend_leases(%s, %s, %s::bigint[], %s::integer[])"
)


@pytest.fixture
def conn(citus_db_url: str) -> Iterator[Conn]:
    with psycopg.connect(citus_db_url, autocommit=True) as connection:
        yield connection


def _two_queues(cluster: CitusCluster, conn: Conn, **policy: Any) -> dict[int, int]:
    """Queues ``hot-0``, ``hot-1``, ... until both worker nodes hold one: {node port: queue}."""
    by_node: dict[int, int] = {}
    database = conn.info.dbname
    for n in range(20):
        queue = create_queue(conn, f"hot-{n}", **policy)
        by_node.setdefault(cluster.node_port_of(database, "codity.jobs", queue), queue)
        if len(by_node) == len(cluster.workers):
            return by_node
    raise AssertionError(f"20 queues and still not one on each worker node: {by_node}")


def _queue_name(conn: Conn, queue: int) -> str:
    return str(one(conn, "SELECT name FROM codity.queues WHERE id = %s", [queue]))


def _remote_commands(conn: Conn, query: str, params: Any) -> tuple[list[Any], list[str]]:
    """Run ``query`` with Citus's remote and local commands logged: its rows, and each
    command as 'issuing <command> | <server>' or 'locally <command>'."""
    logged: list[str] = []

    def keep(notice: psycopg.errors.Diagnostic) -> None:
        text = notice.message_primary or ""
        if text.startswith("issuing "):
            logged.append(f"{text} | {notice.message_detail or ''}")
        elif text.startswith("executing the command locally"):
            logged.append(f"locally {text}")

    conn.execute(
        "SET citus.log_remote_commands = on; SET citus.log_local_commands = on;"
        " SET client_min_messages = log"
    )
    conn.add_notice_handler(keep)
    try:
        rows = conn.execute(query, params).fetchall()
    finally:
        conn.remove_notice_handler(keep)
        conn.execute(
            "RESET citus.log_remote_commands; RESET citus.log_local_commands;"
            " RESET client_min_messages"
        )
    return rows, logged


def _held_jobs(conn: Conn, queue: int, worker: int, count: int) -> list[tuple[int, int]]:
    """``count`` jobs of ``queue`` claimed and started by ``worker``: (job, fence) each."""
    conn.execute(
        *enqueue_many_call(_queue_name(conn, queue), [{"task": "t", "payload": {}}] * count)
    )
    rows = conn.execute(
        "SELECT c.job_id, c.fence FROM codity.claim_in_queue(%s, %s, %s, true, p_start => true)"
        " AS c",
        [queue, worker, count],
    ).fetchall()
    assert len(rows) == count
    return [(int(job), int(fence)) for job, fence in rows]


HOT_CALLS = ["claim", "complete_many", "fail", "release", "extend_leases"]


@pytest.mark.parametrize("call", HOT_CALLS)
def test_each_hot_call_of_the_worker_goes_whole_to_the_node_of_its_queue(
    citus_cluster: CitusCluster, conn: Conn, call: str
) -> None:
    by_node = _two_queues(citus_cluster, conn, max_attempts=3, **NO_BACKOFF)
    names = [_queue_name(conn, q) for q in by_node.values()]
    worker = one(conn, "SELECT codity.register_worker('hot', %s)", [names])
    for port, queue in by_node.items():
        query: str
        params: Any
        if call == "claim":
            conn.execute(*enqueue_many_call(_queue_name(conn, queue), [{"task": "t"}] * 2))
            query = CLAIM_AND_START
            params = {"queue_id": queue, "worker": worker, "limit": 2, "suspects": True}
        else:
            (job, fence), *_ = held = _held_jobs(conn, queue, worker, 2)
            query, params = {
                "complete_many": (
                    COMPLETE_MANY,
                    # The second job waited 120 ms for a slot (issue 29 item 7).
                    [
                        queue,
                        [j for j, _ in held],
                        [f for _, f in held],
                        [Jsonb({"ok": 1})] * 2,
                        [0, 120],
                    ],
                ),
                "fail": (_FAIL, [queue, job, fence, "boom", True, 50]),
                "release": (_RELEASE, [queue, job, fence]),
                "extend_leases": (
                    EXTEND_LEASES,
                    [queue, worker, [j for j, _ in held], [f for _, f in held]],
                ),
            }[call]
        rows, commands = _remote_commands(conn, query, params)
        body = "extend_leases" if call == "extend_leases" else f"{call}_in_queue"
        assert len(commands) == 1, commands
        assert commands[0].startswith("issuing SELECT ") and f"codity.{body}(" in commands[0]
        assert f"on server postgres@127.0.0.1:{port} " in commands[0], (port, commands)
        assert rows, f"{call} answered nothing"
    # And what the calls did is what they say (a refusal would be a useless delegation).
    if call == "claim":
        assert one(conn, "SELECT count(*) FROM codity.jobs WHERE status = 'running'") == 4
    elif call == "complete_many":
        assert one(conn, "SELECT count(*) FROM codity.jobs WHERE status = 'completed'") == 4
    elif call == "fail":
        assert one(conn, "SELECT count(*) FROM codity.jobs WHERE status = 'scheduled'") == 2
    elif call == "release":
        assert one(conn, "SELECT count(*) FROM codity.jobs WHERE attempt = 0") == 2


_SHARD = re.compile(r"codity\.jobs_(\d+)\b")


def test_the_heartbeat_touches_only_the_shards_of_the_queues_of_its_jobs(
    citus_cluster: CitusCluster, conn: Conn
) -> None:
    """The worker's heartbeat over four jobs in two queues on two nodes: the only job shards
    it reads or writes are those two queues' shards, and with multi-shard statements refused
    it still answers 'extended' for each job."""
    by_node = _two_queues(citus_cluster, conn)
    names = [_queue_name(conn, q) for q in by_node.values()]
    worker = one(conn, "SELECT codity.register_worker('hot', %s)", [names])
    held = [
        (job, fence, queue)
        for queue in by_node.values()
        for job, fence in _held_jobs(conn, queue, worker, 2)
    ]
    params = [worker, [j for j, _, _ in held], [f for _, f, _ in held], [q for _, _, q in held]]
    own_shards = {
        str(one(conn, "SELECT get_shard_id_for_distribution_column('codity.jobs', %s)", [q]))
        for q in by_node.values()
    }
    _, commands = _remote_commands(conn, _HEARTBEAT, params)
    touched = {m.group(1) for c in commands for m in _SHARD.finditer(c)}
    assert touched <= own_shards, f"{len(touched)} job shards touched, not {len(own_shards)}"
    conn.execute("SET citus.multi_task_query_log_level = 'error'")
    states = conn.execute(_HEARTBEAT, params).fetchall()
    assert [s for _, _, s in states] == ["extended"] * len(held)


# -- a real worker whose login refuses every multi-shard statement ------------------------------

WORKER_ROLE = "codity_citus_hot_worker"


@pytest.fixture
def worker_login(citus_db_url: str, conn: Conn) -> str:
    """A login granted codity_worker (as a deployment's workers use), for which this
    database refuses any statement that would run on more than one shard."""
    exists = one(conn, "SELECT count(*) FROM pg_catalog.pg_roles WHERE rolname = %s", [WORKER_ROLE])
    if not exists:
        conn.execute(f"CREATE ROLE {WORKER_ROLE} LOGIN IN ROLE codity_worker")
    conn.execute(
        f"ALTER ROLE {WORKER_ROLE} IN DATABASE {conn.info.dbname}"
        " SET citus.multi_task_query_log_level = 'error'"
    )
    parts = urlsplit(citus_db_url)
    return urlunsplit(
        (parts.scheme, f"{WORKER_ROLE}@{parts.hostname}:{parts.port}", parts.path, "", "")
    )


def test_the_multi_shard_detector_refuses_a_statement_over_every_shard(
    citus_cluster: CitusCluster, conn: Conn, worker_login: str
) -> None:
    """The detector of the next test works: as the worker's login, a claim in one queue goes
    through, while ``deregister_worker`` (cold: it looks for the worker's jobs in every queue,
    on every shard) is refused."""
    queue = next(iter(_two_queues(citus_cluster, conn).values()))
    name = _queue_name(conn, queue)
    conn.execute(*enqueue_many_call(name, [{"task": "t"}]))
    with psycopg.connect(worker_login, autocommit=True) as login:
        worker = one(login, "SELECT codity.register_worker('probe', %s)", [[name]])
        claimed = login.execute(
            CLAIM_AND_START, {"queue_id": queue, "worker": worker, "limit": 1, "suspects": True}
        ).fetchall()
        assert len(claimed) == 1
        with pytest.raises(psycopg.errors.InternalError_, match="multi-task query"):
            login.execute("SELECT codity.deregister_worker(%s)", [worker])


def test_a_real_worker_drains_two_nodes_without_one_multi_shard_statement(
    citus_cluster: CitusCluster, citus_db_url: str, conn: Conn, worker_login: str, tmp_path: Path
) -> None:
    """As its login, ``codity worker`` (heartbeat every 0.2 s) drains 200 quick jobs, 6 jobs
    of 1 s (heartbeats with jobs held), 4 that fail twice (a retry, then a dead letter) over
    two queues on two nodes, then is stopped holding two jobs of 60 s, which it releases.
    Every outcome is in the database, and the worker reported no refusal before its stop
    (its deregistration, which looks for its jobs in every queue, is not the hot path)."""
    by_node = _two_queues(conn=conn, cluster=citus_cluster, max_attempts=2, **NO_BACKOFF)
    names = [_queue_name(conn, q) for q in by_node.values()]
    for name in names:
        conn.execute(
            *enqueue_many_call(
                name,
                [{"task": "fault.sleep", "payload": {"seconds": 0}}] * 100
                + [{"task": "fault.sleep", "payload": {"seconds": 1}}] * 3
                + [{"task": "fault.sleep", "payload": {"seconds": "not a number"}}] * 2,
            )
        )
    with Processes(tmp_path, worker_login, WORKER_HEARTBEAT_MS="200") as procs:
        args = ["worker", "--app", "tests.fault_tasks:registry", "--concurrency", "5"]
        worker = procs.start("worker", [*args, *(a for n in names for a in ("--queue", n))])
        with Ticker(citus_db_url, interval=0.2) as ticker:
            wait_until(
                lambda: (
                    one(
                        conn,
                        "SELECT count(*) FROM codity.jobs"
                        " WHERE status IN ('completed', 'dead_letter')",
                    )
                    == 2 * 105
                ),
                timeout=120,
                interval=0.2,
                what="every job completed or dead-lettered",
                alive=[worker],
            )
            for name in names:
                conn.execute(
                    *enqueue_many_call(name, [{"task": "fault.sleep", "payload": {"seconds": 60}}])
                )
            wait_until(
                lambda: one(conn, "SELECT count(*) FROM codity.jobs WHERE status = 'running'") == 2,
                timeout=30,
                what="the two long jobs run",
                alive=[worker],
            )
            heartbeats = one(
                conn, "SELECT last_heartbeat_at FROM codity.workers WHERE status = 'active'"
            )
            wait_until(
                lambda: one(conn, "SELECT max(last_heartbeat_at) FROM codity.workers") > heartbeats,
                timeout=10,
                what="a heartbeat with the long jobs held",
                alive=[worker],
            )
            log_before_stop = worker.log_path.read_text(errors="replace")
            worker.send(signal.SIGTERM)
            worker.wait(timeout=60)
        assert ticker.errors == []
    complaints = [
        line
        for line in log_before_stop.splitlines()
        if any(word in line.lower() for word in ("failed", "refused", "error", "traceback"))
        and "not a number" not in line  # the failing jobs' own errors
        and "could not convert" not in line
    ]
    assert complaints == [], "\n".join(complaints[:10])
    states = dict(
        conn.execute("SELECT status::text, count(*) FROM codity.jobs GROUP BY 1").fetchall()
    )
    assert states == {"completed": 206, "dead_letter": 4, "queued": 2}, states
    assert one(conn, "SELECT count(*) FROM codity.dead_letters") == 4
    assert (
        one(
            conn,
            "SELECT count(*) FROM codity.job_executions"
            " WHERE status = 'released' AND attempt_refunded",
        )
        == 2
    )
