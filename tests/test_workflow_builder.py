"""The Python builders emit the SQL API's JSON and enqueue through it (py/workflows.py).

A graph built in Python is the spec a psql user writes by hand, and runs the same: proven
by comparing the JSON, then enqueueing and running a three-step graph with a real worker
(the README's tutorial), and a batch with its callback.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from codity.worker import JobContext, Registry, WorkerConfig
from codity.workflows import Batch, Callback, Workflow, add_to_batch, seal_batch
from tests.sqlapi import create_queue, one
from tests.worker_runs import run_worker_until


def test_the_builder_spells_the_spec_a_psql_user_writes() -> None:
    registry = Registry()

    @registry.task("img.fetch", queue="images")
    def fetch(payload: Any, ctx: JobContext) -> None:
        return None

    flow = Workflow("thumbnails", idempotency_key="t-1", on_failure="hold")
    a = flow.node("fetch", fetch, {"url": "u"})
    b = flow.node("resize", "img.resize", queue="images", priority=5)
    flow.node("publish", "img.publish", queue="images", after=[a, b.ignoring()])
    assert flow.spec() == {
        "name": "thumbnails",
        "idempotency_key": "t-1",
        "on_failure": "hold",
        "nodes": [
            {"key": "fetch", "queue": "images", "task": "img.fetch", "payload": {"url": "u"}},
            {"key": "resize", "queue": "images", "task": "img.resize", "priority": 5},
            {
                "key": "publish",
                "queue": "images",
                "task": "img.publish",
                "after": ["fetch", {"key": "resize", "on_failure": "ignore"}],
            },
        ],
    }


def test_the_builder_refuses_a_duplicate_key_and_a_foreign_node_where_they_are_made() -> None:
    flow, other = Workflow(), Workflow()
    flow.node("a", "t", queue="q")
    with pytest.raises(ValueError, match="node key 'a' is given twice"):
        flow.node("a", "t", queue="q")
    stranger = other.node("x", "t", queue="q")
    with pytest.raises(ValueError, match="runs after 'x', not a node of this workflow"):
        flow.node("b", "t", queue="q", after=[stranger])
    with pytest.raises(ValueError, match="has no default queue"):
        flow.node("c", "t")


def test_a_three_step_graph_from_python_runs_in_order(
    db_url: str, conn: psycopg.Connection
) -> None:
    """The README's tutorial: fetch and resize at once, publish after both, reading them."""
    create_queue(conn, "images")
    registry = Registry()
    read: dict[str, Any] = {}

    @registry.task("img.fetch")
    def fetch(payload: Any, ctx: JobContext) -> dict[str, str]:
        return {"bytes": payload["url"]}

    @registry.task("img.resize")
    def resize(payload: Any, ctx: JobContext) -> dict[str, int]:
        return {"width": 200}

    @registry.task("img.publish")
    async def publish(payload: Any, ctx: JobContext) -> None:
        read.update({k: p["result"] for k, p in (await ctx.parent_results()).items()})

    flow = Workflow("thumbnails")
    a = flow.node("fetch", fetch, {"url": "https://example.com/a.png"}, queue="images")
    b = flow.node("resize", resize, queue="images")
    flow.node("publish", publish, queue="images", after=[a, b])
    nodes = flow.enqueue(conn)
    assert {k: n.status for k, n in nodes.items()} == {
        "fetch": "queued", "resize": "queued", "publish": "waiting",
    }  # fmt: skip
    run_worker_until(
        db_url,
        registry,
        WorkerConfig(queues=("images",), concurrency=2, heartbeat_s=1.0),
        lambda: (
            one(
                conn,
                "SELECT status::text FROM codity.jobs WHERE id = %s",
                [nodes["publish"].job_id],
            )
            == "completed"
        ),
    )
    assert read == {"fetch": {"bytes": "https://example.com/a.png"}, "resize": {"width": 200}}
    again = flow.enqueue(conn)
    assert {k: n.job_id for k, n in again.items()} != {k: n.job_id for k, n in nodes.items()}


def test_a_batch_from_python_opens_grows_seals_and_calls_back(conn: psycopg.Connection) -> None:
    create_queue(conn, "imports")
    batch = Batch("import", on_all_done=Callback("import.report", queue="imports"), open=True)
    for n in range(3):
        batch.job("import.row", {"row": n}, queue="imports")
    created = batch.enqueue(conn)
    assert len(created.members) == 3 and set(created.callbacks) == {"all_done"} and created.is_new
    more = add_to_batch(conn, created.batch_id, [{"queue": "imports", "task": "import.row"}])
    assert len(more) == 1
    assert seal_batch(conn, created.batch_id) == {"all_done": "waiting"}
    assert (
        one(
            conn,
            "SELECT deps_remaining FROM codity.jobs WHERE id = %s",
            [created.callbacks["all_done"]],
        )
        == 4
    )


def test_a_batch_callback_reads_its_members_by_job_id(
    db_url: str, conn: psycopg.Connection
) -> None:
    """Members have no node key: ctx.parent_results() gives each by its job id (a string),
    not all of them under one None key, where the last would hide the others."""
    create_queue(conn, "imports")
    registry = Registry()
    read: dict[str, Any] = {}

    @registry.task("import.row")
    def row(payload: Any, ctx: JobContext) -> dict[str, int]:
        return {"row": payload["row"]}

    @registry.task("import.report")
    async def report(payload: Any, ctx: JobContext) -> None:
        read.update(
            {k: (p["outcome"], p["result"]) for k, p in (await ctx.parent_results()).items()}
        )

    batch = Batch("import", on_all_done=Callback("import.report", queue="imports"))
    for n in range(3):
        batch.job("import.row", {"row": n}, queue="imports")
    created = batch.enqueue(conn)
    callback = created.callbacks["all_done"]
    run_worker_until(
        db_url,
        registry,
        WorkerConfig(queues=("imports",), concurrency=2, heartbeat_s=1.0),
        lambda: (
            one(conn, "SELECT status::text FROM codity.jobs WHERE id = %s", [callback])
            == "completed"
        ),
    )
    assert read == {
        str(job_id): ("completed", {"row": n}) for n, job_id in enumerate(created.members)
    }
