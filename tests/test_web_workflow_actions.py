"""Workflows and batches over HTTP, written: enqueue a graph, create, grow and seal a batch,
cancel, retry and skip — each answered with the workflow as it stands after the commit, and
every bad input refused with one clear 4xx envelope and nothing written.

The jobs are driven as a worker would, through the SQL API (tests/test_web_workflows.py's
helpers); the isolation matrix (tests/test_web_isolation.py) covers roles and tenants for
every route, these routes included.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from codity.web.access import Role
from tests.sqlapi import one
from tests.test_web_workflows import QUEUE, diamond, node, settle, setup_project
from tests.webapp import Tenant, User, add_user, make_tenant, web_client


@pytest.fixture
def tenant(conn: psycopg.Connection) -> Tenant:
    return make_tenant(conn)


@pytest.fixture
def worker(conn: psycopg.Connection, tenant: Tenant) -> int:
    return setup_project(conn, tenant)


@pytest.fixture
def member(conn: psycopg.Connection, tenant: Tenant) -> User:
    return add_user(conn, tenant, Role.MEMBER)


def _post(client: Any, path: str, who: User, body: Any = None) -> Any:
    return client.post(path, headers=who.headers, json=body)


def _ok(response: Any, status: int = 200) -> tuple[Any, dict[str, Any]]:
    assert response.status_code == status, response.text
    answer = response.json()
    return answer["data"], answer.get("meta") or {}


def _statuses(workflow: dict[str, Any]) -> dict[str, str]:
    return {n["node_key"]: n["status"] for n in workflow["nodes"]}


def _written(conn: psycopg.Connection) -> tuple[int, int, int]:
    return (
        int(one(conn, "SELECT count(*) FROM codity.workflows")),
        int(one(conn, "SELECT count(*) FROM codity.jobs")),
        int(one(conn, "SELECT count(*) FROM codity.job_deps")),
    )


def test_a_workflow_enqueued_over_http_is_answered_whole_and_a_repeat_is_not_written_twice(
    db_url: str, conn: psycopg.Connection, tenant: Tenant, worker: int, member: User
) -> None:
    spec = {
        "name": "thumbnails",
        "idempotency_key": "upload-42",
        "nodes": [
            node("fetch"),
            node("resize"),
            node("publish", "fetch", {"key": "resize", "on_failure": "ignore"}),
        ],
    }
    with web_client(db_url) as client:
        made, meta = _ok(_post(client, "/api/v1/workflows", member, spec), 201)
        again, again_meta = _ok(_post(client, "/api/v1/workflows", member, spec), 200)
    assert meta == {"duplicate": False} and again_meta == {"duplicate": True}
    assert again["id"] == made["id"] and made["kind"] == "workflow"
    assert made["name"] == "thumbnails" and made["state"] == "running"
    assert _statuses(made) == {"fetch": "queued", "resize": "queued", "publish": "waiting"}
    policies = {(e["parent_id"], e["child_id"]): e["on_failure"] for e in made["edges"]}
    ids = {n["node_key"]: n["id"] for n in made["nodes"]}
    assert policies == {
        (ids["fetch"], ids["publish"]): "cancel",
        (ids["resize"], ids["publish"]): "ignore",
    }
    assert one(conn, "SELECT count(*) FROM codity.workflows") == 1
    # The graph runs as any other: publish is released when its two parents completed.
    settle(conn, worker, {ids["fetch"]: "complete", ids["resize"]: "complete"})
    assert one(conn, "SELECT status::text FROM codity.jobs WHERE id = %s", [ids["publish"]]) == (
        "queued"
    )


BAD_WORKFLOWS: list[tuple[str, Any, int, str]] = [
    ("a cycle", [node("a", "b"), node("b", "a")], 422, "cycle"),
    ("a self-edge", [node("a", "a")], 422, "itself"),
    ("an unknown parent", [node("a", "ghost")], 422, "ghost"),
    ("a duplicate key", [node("a"), node("a")], 422, "a"),
    ("a queue of no project of ours", [node("a", queue="nowhere")], 404, "queue"),
    ("no node", [], 422, "nodes"),
    ("10,001 nodes", [node(f"n{i}") for i in range(10_001)], 422, "nodes"),
    ("an unknown field", [{**node("a"), "colour": "red"}], 422, "colour"),
    (
        "a bad edge policy",
        [node("a"), node("b", {"key": "a", "on_failure": "retry"})],
        422,
        "on_failure",
    ),
    ("a key with a NUL", [node("a\x00b")], 422, "key"),
    ("a payload that is not an object", [{**node("a"), "payload": [1]}], 422, "payload"),
]


@pytest.mark.parametrize(
    ("nodes", "status", "word"),
    [case[1:] for case in BAD_WORKFLOWS],
    ids=[case[0] for case in BAD_WORKFLOWS],
)
def test_a_bad_workflow_is_one_clear_refusal_and_nothing_is_written(
    db_url: str,
    conn: psycopg.Connection,
    tenant: Tenant,
    worker: int,
    member: User,
    nodes: Any,
    status: int,
    word: str,
) -> None:
    before = _written(conn)
    with web_client(db_url) as client:
        got = _post(client, "/api/v1/workflows", member, {"name": "bad", "nodes": nodes})
    assert got.status_code == status, got.text[:500]
    error = got.json()["error"]
    assert error["code"] in ("invalid_input", "not_found", "validation_failed"), error
    assert word in got.text, error
    assert _written(conn) == before


def test_a_workflow_cannot_reach_another_projects_queue(
    db_url: str, conn: psycopg.Connection, tenant: Tenant, worker: int, member: User
) -> None:
    other = make_tenant(conn, "other-org")
    setup_project(conn, other, "theirs")
    before = _written(conn)
    with web_client(db_url) as client:
        got = _post(
            client,
            "/api/v1/workflows",
            member,
            {"nodes": [node("a"), node("b", "a", queue="theirs")]},
        )
    assert got.status_code == 404, got.text
    assert got.json()["error"]["code"] == "not_found"
    assert _written(conn) == before


def test_an_operator_retries_skips_and_cancels_over_http(
    db_url: str, conn: psycopg.Connection, tenant: Tenant, worker: int, member: User
) -> None:
    """extract -> (left, right) -> load, right dead-lettered: load cancelled with it."""
    flow = diamond(conn, tenant, worker)
    base = f"/api/v1/workflows/{flow.id}"
    with web_client(db_url) as client:
        retried, meta = _ok(_post(client, base + "/retry", member, {"mode": "failed"}))
        assert meta == {"retried": 2}  # right and the load it had cancelled
        assert _statuses(retried) == {
            "extract": "completed", "left": "completed", "right": "queued", "load": "waiting",
        }  # fmt: skip
        settle(conn, worker, {flow.jobs["right"]: "fail"})
        # right dead again: skip it, and the load it cancelled waits no more.
        skipped, meta = _ok(_post(client, base + "/nodes/right/skip", member))
        assert meta == {"skipped_job_id": flow.jobs["right"], "previous_status": "dead_letter"}
        assert _statuses(skipped)["right"] == "completed"
        assert _statuses(skipped)["load"] == "queued"
        # Skipping what already ran is refused, and changes nothing.
        refused = _post(client, base + "/nodes/left/skip", member)
        assert refused.status_code == 409, refused.text
        assert refused.json()["error"]["code"] == "illegal_transition"
        assert _post(client, base + "/nodes/nowhere/skip", member).status_code == 404
        cancelled, meta = _ok(_post(client, base + "/cancel", member))
        assert meta == {"cancelled": 1}
        assert cancelled["state"] == "failed" and _statuses(cancelled)["load"] == "cancelled"
        bad_mode = _post(client, base + "/retry", member, {"mode": "everything"})
        assert bad_mode.status_code == 422, bad_mode.text
        everything, meta = _ok(_post(client, base + "/retry", member, {"mode": "all"}))
    assert meta == {"retried": 4}
    assert _statuses(everything) == {
        "extract": "queued", "left": "waiting", "right": "waiting", "load": "waiting",
    }  # fmt: skip


def test_retrying_a_workflow_with_a_node_still_running_is_refused(
    db_url: str, conn: psycopg.Connection, tenant: Tenant, worker: int, member: User
) -> None:
    flow = diamond(conn, tenant, worker, run=False)
    conn.execute(
        "SELECT * FROM codity.claim(%s, %s, 1, p_start => true)", [worker, QUEUE]
    ).fetchall()
    before = conn.execute("SELECT id, status, attempt FROM codity.jobs ORDER BY id").fetchall()
    with web_client(db_url) as client:
        got = _post(client, f"/api/v1/workflows/{flow.id}/retry", member, {"mode": "all"})
    assert got.status_code == 409, got.text
    assert got.json()["error"]["details"]["sqlstate"] == "CD020"
    assert conn.execute("SELECT id, status, attempt FROM codity.jobs ORDER BY id").fetchall() == (
        before
    )


def test_a_batch_is_created_open_grown_sealed_and_calls_back(
    db_url: str, conn: psycopg.Connection, tenant: Tenant, worker: int, member: User
) -> None:
    job = {"queue": QUEUE, "task": "member"}
    spec = {
        "name": "import",
        "open": True,
        "jobs": [job, job],
        "callbacks": {"all_done": {"queue": QUEUE, "task": "report"}},
    }
    with web_client(db_url) as client:
        made, meta = _ok(_post(client, "/api/v1/batches", member, spec), 201)
        assert meta == {"duplicate": False}
        assert made["kind"] == "batch" and made["state"] == "open" and made["sealed_at"] is None
        batch = f"/api/v1/batches/{made['id']}"
        added, meta = _ok(_post(client, batch + "/jobs", member, {"jobs": [job]}), 201)
        assert meta == {"batch_id": made["id"], "added": 1} and len(added) == 1
        assert added[0]["status"] == "queued"
        sealed, _ = _ok(_post(client, batch + "/seal", member))
        assert sealed["state"] == "running" and sealed["sealed_at"] is not None
        again, _ = _ok(_post(client, batch + "/seal", member))
        assert again["sealed_at"] == sealed["sealed_at"]
        late = _post(client, batch + "/jobs", member, {"jobs": [job]})
        assert late.status_code == 409, late.text
        assert _post(client, batch + "/jobs", member, {"jobs": []}).status_code == 422
        no_jobs = _post(client, "/api/v1/batches", member, {"callbacks": {}})
        assert no_jobs.status_code == 422 and "open" in no_jobs.text
    members = [n["id"] for n in sealed["nodes"] if n["node_key"] is None]
    callback = next(n["id"] for n in sealed["nodes"] if n["node_key"] == "all_done")
    assert len(members) == 3
    settle(conn, worker, dict.fromkeys(members, "complete"))
    assert one(conn, "SELECT status::text FROM codity.jobs WHERE id = %s", [callback]) == "queued"


def test_a_viewer_may_read_but_not_act(
    db_url: str, conn: psycopg.Connection, tenant: Tenant, worker: int
) -> None:
    viewer = add_user(conn, tenant, Role.VIEWER)
    flow = diamond(conn, tenant, worker)
    before = conn.execute("SELECT id, status FROM codity.jobs ORDER BY id").fetchall()
    with web_client(db_url) as client:
        for path, body in (
            ("/api/v1/workflows", {"nodes": [node("a")]}),
            (f"/api/v1/workflows/{flow.id}/cancel", None),
            (f"/api/v1/workflows/{flow.id}/retry", {"mode": "failed"}),
            (f"/api/v1/workflows/{flow.id}/nodes/right/skip", None),
            ("/api/v1/batches", {"jobs": [{"queue": QUEUE, "task": "t"}]}),
        ):
            got = _post(client, path, viewer, body)
            assert got.status_code == 403, (path, got.text)
    assert conn.execute("SELECT id, status FROM codity.jobs ORDER BY id").fetchall() == before


def test_a_batch_with_nothing_in_it_is_refused_not_a_server_error(
    db_url: str, conn: psycopg.Connection, tenant: Tenant, worker: int, member: User
) -> None:
    """Found by the fuzz: an open batch with no job and no callback made no row, so the
    route had no id to answer with (500). The model and the database both refuse it."""
    before = _written(conn)
    with web_client(db_url) as client:
        got = _post(client, "/api/v1/batches", member, {"open": True, "jobs": [], "callbacks": {}})
    assert got.status_code == 422, got.text
    assert "a job or a callback" in got.text
    with pytest.raises(psycopg.Error) as caught:
        conn.execute(
            "SELECT * FROM codity.create_batch(%s, %s)",
            [Jsonb({"open": True, "jobs": []}), tenant.project_id],
        )
    assert caught.value.sqlstate == "CD010" and "a job or a callback" in str(caught.value)
    assert _written(conn) == before
