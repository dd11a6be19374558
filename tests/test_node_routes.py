"""The worker's routes to Citus worker nodes (codity.worker.node_routes), on a real server.

On one server ``codity.queue_nodes`` answers no rows, and every call stays on the worker's
one pool: every other worker test runs that way. Here the routes are given by hand, as the
coordinator would give them, and this test's own server stands in for a node:

- a queue routed to a node that answers gets that node's pool, other queues none;
- a node that cannot be reached is left alone (one warning, no second attempt within
  RETRY_S), and its queues' calls stay on the coordinator;
- a call lost on a node sends its queues back to the coordinator;
- the worker asks ``codity.queue_nodes`` as its role may, and on one server gets nothing.

Break it: ``pool()`` returning the pool of a node still opening, or of a node that failed
to open, fails the second test (it would hand out a pool with no connection; a call would
wait its whole deadline); ``lost()`` not dropping the pool fails the third.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest

from codity.worker import node_routes
from codity.worker.node_routes import NodeRoutes
from tests.sqlapi import create_queue, one


def _address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    return parts.hostname, parts.port


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rows(*routes: tuple[int, str, int]) -> list[dict[str, Any]]:
    return [{"queue_id": q, "node_host": h, "node_port": p} for q, h, p in routes]


async def _opened(routes: NodeRoutes) -> None:
    """Wait for every pool being opened to be open or given up."""
    while routes._opening:
        await asyncio.gather(*routes._opening.values(), return_exceptions=True)


def test_a_queue_routed_to_a_node_that_answers_is_called_there(db_url: str) -> None:
    host, port = _address(db_url)

    async def scenario() -> tuple[str, Any, Any, dict[int, tuple[str, int]]]:
        routes = NodeRoutes(db_url)
        try:
            routes.update(_rows((7, host, port)))
            await _opened(routes)
            pool = routes.pool(7)
            assert pool is not None
            async with pool.connection() as conn:
                cur = await conn.execute("SELECT current_setting('application_name')")
                row = await cur.fetchone()
            assert row is not None
            return str(row[0]), routes.pool(8), routes.pool(None), routes.nodes()
        finally:
            await routes.close()

    application, other, unnamed, nodes = asyncio.run(scenario())
    assert application == "codity-worker"
    assert other is None and unnamed is None  # not routed: the coordinator's pool
    assert nodes == {7: (host, port)}


def test_a_node_that_cannot_be_reached_leaves_its_queues_on_the_coordinator(
    db_url: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(node_routes, "OPEN_TIMEOUT_S", 2.0)
    closed = _closed_port()

    async def scenario() -> tuple[Any, Any, int]:
        routes = NodeRoutes(db_url)
        try:
            routes.update(_rows((7, "127.0.0.1", closed)))
            early = routes.pool(7)  # still opening: not handed out
            await _opened(routes)
            routes.update(_rows((7, "127.0.0.1", closed)))  # within RETRY_S: not tried again
            tried_again = len(routes._opening)
            return early, routes.pool(7), tried_again
        finally:
            await routes.close()

    with caplog.at_level(logging.WARNING, logger="codity.worker.node_routes"):
        early, after, tried_again = asyncio.run(scenario())
    assert early is None and after is None
    assert tried_again == 0
    warnings = [r.getMessage() for r in caplog.records if r.name == node_routes.__name__]
    assert len(warnings) == 1, warnings
    assert f"node 127.0.0.1:{closed}: it could not be reached" in warnings[0]
    assert "its queues' calls go through the coordinator" in warnings[0]


def test_a_call_lost_on_a_node_sends_its_queues_back_to_the_coordinator(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    host, port = _address(db_url)

    async def scenario() -> tuple[bool, Any, Any]:
        routes = NodeRoutes(db_url)
        try:
            routes.update(_rows((7, host, port), (8, host, port)))
            await _opened(routes)
            before = routes.pool(7) is not None
            routes.lost(7, psycopg.OperationalError("server closed the connection"))
            return before, routes.pool(7), routes.pool(8)
        finally:
            await routes.close()

    with caplog.at_level(logging.WARNING, logger="codity.worker.node_routes"):
        before, seven, eight = asyncio.run(scenario())
    assert before
    assert seven is None and eight is None  # the node's every queue, not only the one
    assert any("a call went unanswered" in r.getMessage() for r in caplog.records)
    assert f"node {host}:{port}" in caplog.text


def test_routing_turned_off_takes_no_route(db_url: str) -> None:
    host, port = _address(db_url)

    async def scenario() -> Any:
        routes = NodeRoutes(db_url, enabled=False)
        routes.update(_rows((7, host, port)))
        await _opened(routes)
        found = routes.pool(7)
        await routes.close()
        return found

    assert asyncio.run(scenario()) is None


def test_on_one_server_the_worker_role_gets_no_route(conn: psycopg.Connection) -> None:
    create_queue(conn, "routed")
    worker = one(conn, "SELECT codity.register_worker('w', ARRAY['routed'], 5, 'h', 1)")
    with conn.transaction():
        conn.execute("SET LOCAL ROLE codity_worker")
        rows = conn.execute("SELECT * FROM codity.queue_nodes(%s)", [worker]).fetchall()
    assert rows == []
    with pytest.raises(psycopg.Error, match="worker 0 does not exist") as refused:
        conn.execute("SELECT * FROM codity.queue_nodes(0)")
    assert refused.value.sqlstate == "CD004"
