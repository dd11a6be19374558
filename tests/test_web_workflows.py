"""Workflows and batches over HTTP, read-only: the list with its derived state, filters and
bounded keyset pages, one workflow with its nodes and edges (capped, with a flag), the
workflow a job belongs to, and the usual refusals (404 for another tenant's or a missing id,
422 for bad query parameters, 401/viewer rules).

Workflows are enqueued through ``codity.enqueue_workflow`` and driven through the SQL API
as a worker would (claim, start, complete, fail into the dead letters, cancel);
batches are made by ``codity.create_batch`` (and sealed by ``codity.seal_batch``), their
callbacks released by the engine as members settle.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from codity.web.access import Role
from codity.web.endpoints import workflows as workflows_api
from tests.sqlapi import one
from tests.webapp import Tenant, User, add_user, api_key, bearer, make_tenant, web_client

QUEUE = "wf"


# ---------------------------------------------------------------------------------------
# Making workflows and batches (also used by tests/test_dashboard_workflows.py)
# ---------------------------------------------------------------------------------------


@dataclass
class Flow:
    id: int
    jobs: dict[str, int]
    """Node key (a batch: "m1", "m2", ... for members, callbacks by their key) -> job id."""


def node(key: str, *after: Any, queue: str = QUEUE, task: str = "t") -> dict[str, Any]:
    spec: dict[str, Any] = {"key": key, "queue": queue, "task": task}
    if after:
        spec["after"] = list(after)
    return spec


def setup_project(conn: psycopg.Connection, tenant: Tenant, *queues: str) -> int:
    """The tenant's queues (one attempt each: a failure dead-letters) and a worker for them."""
    for name in queues or (QUEUE,):
        conn.execute("SELECT * FROM codity.create_queue(%s, %s, 1)", [name, tenant.project_id])
    return register(conn, tenant, *queues)


def register(conn: psycopg.Connection, tenant: Tenant, *queues: str) -> int:
    """A worker for the queues (heartbeat 1 s: a live system declares the silent dead in 3)."""
    return int(
        one(
            conn,
            "SELECT codity.register_worker('w', %s, 1000, 'h', 1, %s, 1)",
            [list(queues or (QUEUE,)), tenant.project_id],
        )
    )


def enqueue_workflow(
    conn: psycopg.Connection, tenant: Tenant, nodes: list[dict[str, Any]], name: str = "flow"
) -> Flow:
    rows = conn.execute(
        "SELECT workflow_id, node_key, job_id FROM codity.enqueue_workflow(%s, %s)",
        [Jsonb({"name": name, "nodes": nodes}), tenant.project_id],
    ).fetchall()
    return Flow(rows[0][0], {key: job for _, key, job in rows})


def settle(
    conn: psycopg.Connection, worker: int, outcomes: dict[int, str], queue: str = QUEUE
) -> None:
    """Claim as many jobs of the queue as ``outcomes`` names, which must be exactly those
    (the queue's first in claim order), and complete or fail each ("complete" / "fail": one
    attempt, so into the dead letters)."""
    claimed = conn.execute(
        "SELECT job_id, fence FROM codity.claim(%s, %s, %s, p_start => true)",
        [worker, queue, len(outcomes)],
    ).fetchall()
    assert {job for job, _ in claimed} == set(outcomes)
    for job, fence in claimed:
        if outcomes[job] == "complete":
            conn.execute("SELECT * FROM codity.complete(%s, %s)", [job, fence])
        else:
            conn.execute("SELECT * FROM codity.fail(%s, %s, 'boom')", [job, fence])


def diamond(
    conn: psycopg.Connection,
    tenant: Tenant,
    worker: int,
    *,
    name: str = "diamond",
    policy: str = "cancel",
    run: bool = True,
) -> Flow:
    """extract -> (left, right) -> load. Run: extract and left complete, right dies; what
    load then is depends on the edge right -> load (``policy``): cancelled (cancel), held
    waiting (hold), queued (ignore)."""
    flow = enqueue_workflow(
        conn,
        tenant,
        [
            node("extract"),
            node("left", "extract"),
            node("right", "extract"),
            node("load", "left", {"key": "right", "on_failure": policy}, task="load"),
        ],
        name,
    )
    if run:
        settle(conn, worker, {flow.jobs["extract"]: "complete"})
        settle(conn, worker, {flow.jobs["left"]: "complete", flow.jobs["right"]: "fail"})
    return flow


def batch(
    conn: psycopg.Connection,
    tenant: Tenant,
    members: int,
    *,
    name: str = "batch",
    sealed: bool = True,
    callbacks: tuple[str, ...] = ("all_done", "all_succeeded", "any_dead"),
    queue: str = QUEUE,
) -> Flow:
    """A batch through ``codity.create_batch``: members "m1".."mN" (in that claim order),
    callbacks by their key, all in one queue; open when not ``sealed``."""
    spec = {
        "name": name,
        "open": not sealed,
        "jobs": [{"queue": queue, "task": "member", "payload": {"n": n}} for n in range(members)],
        "callbacks": {key: {"queue": queue, "task": f"on_{key}"} for key in callbacks},
    }
    rows = conn.execute(
        "SELECT batch_id, job_id, callback FROM codity.create_batch(%s, %s)",
        [Jsonb(spec), tenant.project_id],
    ).fetchall()
    member_ids = [job for _, job, callback in rows if callback is None]
    jobs = {f"m{i + 1}": job for i, job in enumerate(member_ids)}
    jobs |= {callback: job for _, job, callback in rows if callback is not None}
    return Flow(int(rows[0][0]), jobs)


# ---------------------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------------------


@pytest.fixture
def tenant(conn: psycopg.Connection) -> Tenant:
    return make_tenant(conn)


@pytest.fixture
def worker(conn: psycopg.Connection, tenant: Tenant) -> int:
    return setup_project(conn, tenant)


@pytest.fixture
def viewer(conn: psycopg.Connection, tenant: Tenant) -> User:
    return add_user(conn, tenant, Role.VIEWER)


def _get(client: Any, path: str, who: User | dict[str, str], **params: Any) -> Any:
    headers = who.headers if isinstance(who, User) else who
    return client.get(path, headers=headers, params=params)


def _data(response: Any) -> Any:
    assert response.status_code == 200, response.text
    return response.json()["data"]


# ---------------------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------------------


def test_a_workflow_is_listed_and_read_with_its_nodes_edges_and_counts(
    db_url: str, conn: psycopg.Connection, tenant: Tenant, worker: int, viewer: User
) -> None:
    flow = diamond(conn, tenant, worker, run=False)
    settle(conn, worker, {flow.jobs["extract"]: "complete"})
    with web_client(db_url) as client:
        listed = _get(client, "/api/v1/workflows", viewer)
        detail = _data(_get(client, f"/api/v1/workflows/{flow.id}", viewer))
    assert listed.status_code == 200
    (summary,) = listed.json()["data"]
    assert listed.json()["meta"] == {"next_cursor": None, "limit": 50}
    assert summary["id"] == flow.id and summary["kind"] == "workflow"
    assert summary["name"] == "diamond" and summary["state"] == "running"
    assert (summary["node_count"], summary["edge_count"]) == (4, 4)
    assert summary["counts"] == {
        "waiting": 1,
        "scheduled": 0,
        "queued": 2,
        "claimed": 0,
        "running": 0,
        "completed": 1,
        "failed": 0,
        "dead_letter": 0,
        "cancelled": 0,
    }
    assert summary["member_counts"] is None and summary["callbacks"] == []
    assert summary["sealed_at"] is not None
    assert {k: v for k, v in detail.items() if k not in ("nodes", "edges")} == {
        **summary,
        "max_nodes": 10_000,
        "nodes_truncated": False,
        "edges_truncated": False,
    }
    nodes = {n["node_key"]: n for n in detail["nodes"]}
    assert detail["nodes"][0]["node_key"] == "extract", "in depth order"
    facts = {k: (n["id"], n["status"], n["depth"], n["deps_remaining"]) for k, n in nodes.items()}
    assert facts == {
        "extract": (flow.jobs["extract"], "completed", 0, 0),
        "left": (flow.jobs["left"], "queued", 1, 0),
        "right": (flow.jobs["right"], "queued", 1, 0),
        "load": (flow.jobs["load"], "waiting", 2, 2),
    }
    assert nodes["load"]["queue"] == QUEUE and nodes["load"]["task"] == "load"
    assert nodes["extract"]["attempt"] == 1 and nodes["extract"]["finished_at"] is not None
    edges = {(e["parent_id"], e["child_id"]): e for e in detail["edges"]}
    j = flow.jobs
    assert set(edges) == {
        (j["extract"], j["left"]),
        (j["extract"], j["right"]),
        (j["left"], j["load"]),
        (j["right"], j["load"]),
    }
    assert edges[(j["extract"], j["left"])]["resolved"] == "completed"
    assert edges[(j["extract"], j["left"])]["resolved_at"] is not None
    assert edges[(j["left"], j["load"])]["resolved"] is None
    assert {e["on_failure"] for e in edges.values()} == {"cancel"}


@pytest.mark.parametrize(
    ("policy", "state", "load"),
    [
        ("cancel", "failed", "cancelled"),
        ("hold", "held", "waiting"),
        ("ignore", "running", "queued"),
    ],
)
def test_the_state_follows_what_a_dead_parent_does_to_its_child(
    db_url: str,
    conn: psycopg.Connection,
    tenant: Tenant,
    worker: int,
    viewer: User,
    policy: str,
    state: str,
    load: str,
) -> None:
    """A dead branch: the child cancelled (failed), held waiting (held: nothing can move
    until an operator acts), or released anyway (running)."""
    flow = diamond(conn, tenant, worker, policy=policy)
    with web_client(db_url) as client:
        detail = _data(_get(client, f"/api/v1/workflows/{flow.id}", viewer))
    assert detail["state"] == state
    statuses = {n["node_key"]: n["status"] for n in detail["nodes"]}
    assert statuses == {
        "extract": "completed",
        "left": "completed",
        "right": "dead_letter",
        "load": load,
    }
    (edge,) = [e for e in detail["edges"] if e["parent_id"] == flow.jobs["right"]]
    assert (edge["on_failure"], edge["resolved"]) == (policy, "dead_letter")
    if policy == "ignore":
        settle(conn, worker, {flow.jobs["load"]: "complete"})
        with web_client(db_url) as client:
            done = _data(_get(client, f"/api/v1/workflows/{flow.id}", viewer))
        assert done["state"] == "failed", "a dead node and nothing unfinished"


def test_a_workflow_whose_every_node_completed_is_completed(
    db_url: str, conn: psycopg.Connection, tenant: Tenant, worker: int, viewer: User
) -> None:
    flow = enqueue_workflow(conn, tenant, [node("a"), node("b", "a")])
    settle(conn, worker, {flow.jobs["a"]: "complete"})
    settle(conn, worker, {flow.jobs["b"]: "complete"})
    with web_client(db_url) as client:
        (summary,) = _data(_get(client, "/api/v1/workflows", viewer))
    assert summary["state"] == "completed"
    assert summary["counts"]["completed"] == 2


def test_a_batch_reads_its_members_callbacks_and_seal(
    db_url: str, conn: psycopg.Connection, tenant: Tenant, worker: int, viewer: User
) -> None:
    flow = batch(conn, tenant, 5, sealed=False)
    with web_client(db_url) as client:
        opened = _data(_get(client, f"/api/v1/workflows/{flow.id}", viewer))
        conn.execute("SELECT * FROM codity.seal_batch(%s, %s)", [flow.id, tenant.project_id])
        members = [flow.jobs[f"m{i}"] for i in range(1, 6)]
        settle(conn, worker, {m: "fail" if m == members[2] else "complete" for m in members})
        running = _data(_get(client, f"/api/v1/workflows/{flow.id}", viewer))
        settle(conn, worker, {flow.jobs["all_done"]: "complete", flow.jobs["any_dead"]: "complete"})
        failed = _data(_get(client, f"/api/v1/workflows/{flow.id}", viewer))
    assert opened["kind"] == "batch" and opened["sealed_at"] is None
    assert opened["state"] == "open"
    assert opened["member_counts"]["queued"] == 5 and opened["counts"]["waiting"] == 3
    assert [(c["node_key"], c["status"]) for c in opened["callbacks"]] == [
        ("all_done", "waiting"),
        ("all_succeeded", "waiting"),
        ("any_dead", "waiting"),
    ]
    assert [c["job_id"] for c in opened["callbacks"]] == [
        flow.jobs["all_done"],
        flow.jobs["all_succeeded"],
        flow.jobs["any_dead"],
    ]
    # Callbacks first, then the dead member; edges are member -> callback.
    assert running["sealed_at"] is not None
    assert running["member_counts"]["completed"] == 4
    assert running["member_counts"]["dead_letter"] == 1
    # all_done ignores the dead member, all_succeeded is cancelled by it, any_dead runs for it.
    assert {c["node_key"]: c["status"] for c in running["callbacks"]} == {
        "all_done": "queued",
        "all_succeeded": "cancelled",
        "any_dead": "queued",
    }
    assert running["state"] == "running"
    assert failed["state"] == "failed"
    assert {n["depth"] for n in failed["nodes"] if n["node_key"]} == {1}
    assert len(failed["edges"]) == 15


def test_a_batch_that_went_well_is_completed_though_its_any_dead_callback_was_cancelled(
    db_url: str, conn: psycopg.Connection, tenant: Tenant, worker: int, viewer: User
) -> None:
    flow = batch(conn, tenant, 2)
    settle(conn, worker, {flow.jobs["m1"]: "complete", flow.jobs["m2"]: "complete"})
    with web_client(db_url) as client:
        (before,) = _data(_get(client, "/api/v1/workflows", viewer))
        callbacks = {flow.jobs["all_done"]: "complete", flow.jobs["all_succeeded"]: "complete"}
        settle(conn, worker, callbacks)
        (summary,) = _data(_get(client, "/api/v1/workflows", viewer))
    assert {c["node_key"]: c["status"] for c in before["callbacks"]} == {
        "all_done": "queued",
        "all_succeeded": "queued",
        "any_dead": "cancelled",
    }
    assert before["state"] == "running"
    assert summary["state"] == "completed"
    assert summary["counts"]["cancelled"] == 1, "any_dead, cancelled by design"


def test_a_large_batch_answers_callbacks_then_failures_first_and_says_it_is_truncated(
    db_url: str, conn: psycopg.Connection, tenant: Tenant, worker: int, viewer: User
) -> None:
    flow = batch(conn, tenant, 30)
    dead = [flow.jobs["m29"], flow.jobs["m30"]]
    settle(
        conn,
        worker,
        {
            job: "fail" if job in dead else "complete"
            for k, job in flow.jobs.items()
            if k.startswith("m")
        },
    )
    with web_client(db_url) as client:
        capped = _data(_get(client, f"/api/v1/workflows/{flow.id}", viewer, max_nodes=5))
        whole = _data(_get(client, f"/api/v1/workflows/{flow.id}", viewer))
    assert capped["nodes_truncated"] is True and capped["max_nodes"] == 5
    assert {n["id"] for n in capped["nodes"]} == {
        flow.jobs["all_done"],
        flow.jobs["all_succeeded"],
        flow.jobs["any_dead"],
        *dead,
    }
    assert sum(capped["counts"].values()) == 33, "counts are over every job, capped or not"
    assert len(capped["edges"]) == 6, "only edges between the nodes answered"
    assert whole["nodes_truncated"] is False and len(whole["nodes"]) == 33
    assert len(whole["edges"]) == 90 and whole["edges_truncated"] is False


def test_filters_by_kind_and_state_and_pages_through_every_workflow_once(
    db_url: str, conn: psycopg.Connection, tenant: Tenant, worker: int, viewer: User
) -> None:
    failed = diamond(conn, tenant, worker, name="failed")
    running = [enqueue_workflow(conn, tenant, [node("a")], name=f"r{i}").id for i in range(4)]
    opened = batch(conn, tenant, 2, sealed=False, name="open").id
    with web_client(db_url) as client:
        seen, cursor = [], None
        while True:
            params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
            page = _get(client, "/api/v1/workflows", viewer, **params).json()
            seen += [w["id"] for w in page["data"]]
            assert len(page["data"]) <= 2
            cursor = page["meta"]["next_cursor"]
            if cursor is None:
                break
        batches = _data(_get(client, "/api/v1/workflows", viewer, kind="batch"))
        flows = _data(_get(client, "/api/v1/workflows", viewer, kind="workflow"))
        by_state = {
            s: [w["id"] for w in _data(_get(client, "/api/v1/workflows", viewer, state=s))]
            for s in ("running", "failed", "open", "held", "completed")
        }
        both = _data(_get(client, "/api/v1/workflows", viewer, kind="workflow", state="open"))
    assert seen == sorted([failed.id, *running, opened], reverse=True), "newest first, once each"
    assert [w["id"] for w in batches] == [opened]
    assert [w["id"] for w in flows] == sorted([failed.id, *running], reverse=True)
    assert by_state == {
        "running": running[::-1],
        "failed": [failed.id],
        "open": [opened],
        "held": [],
        "completed": [],
    }
    assert both == []


def test_a_page_reads_a_bounded_number_of_workflows_and_jobs_and_says_where_to_go_on(
    db_url: str,
    conn: psycopg.Connection,
    tenant: Tenant,
    worker: int,
    viewer: User,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With a state filter a page reads at most LIST_SCAN_WORKFLOWS workflows; any page
    counts the jobs of at most LIST_SCAN_JOBS nodes (the first workflow's always). A short
    page with a cursor is not the end; following cursors finds every match once."""
    target = diamond(conn, tenant, worker, name="the failed one").id
    others = [enqueue_workflow(conn, tenant, [node("a"), node("b", "a")]).id for _ in range(5)]
    monkeypatch.setattr(workflows_api, "LIST_SCAN_WORKFLOWS", 2)
    with web_client(db_url) as client:
        pages, cursor = [], None
        while True:
            params = {"state": "failed", **({"cursor": cursor} if cursor else {})}
            body = _get(client, "/api/v1/workflows", viewer, **params).json()
            pages.append([w["id"] for w in body["data"]])
            cursor = body["meta"]["next_cursor"]
            if cursor is None:
                break
        monkeypatch.setattr(workflows_api, "LIST_SCAN_JOBS", 5)
        budget = _get(client, "/api/v1/workflows", viewer, limit=50).json()
    assert pages == [[], [], [target]], "two workflows a page: 5 running, then the failed one"
    assert [w["id"] for w in budget["data"]] == [others[-1], others[-2]], "2 + 2 nodes <= 5"
    assert budget["meta"]["next_cursor"] is not None


def test_the_job_knows_its_workflow_and_node(
    db_url: str, conn: psycopg.Connection, tenant: Tenant, worker: int, viewer: User
) -> None:
    flow = diamond(conn, tenant, worker, run=False)
    member = batch(conn, tenant, 1, name="b").jobs["m1"]
    plain = one(
        conn,
        "SELECT job_id FROM codity.enqueue(%s, 't', p_project_id => %s)",
        [QUEUE, tenant.project_id],
    )
    with web_client(db_url) as client:
        of_node = _data(_get(client, f"/api/v1/jobs/{flow.jobs['load']}/workflow", viewer))
        of_member = _data(_get(client, f"/api/v1/jobs/{member}/workflow", viewer))
        of_plain = _data(_get(client, f"/api/v1/jobs/{plain}/workflow", viewer))
        missing = _get(client, "/api/v1/jobs/8999999999/workflow", viewer)
    assert of_node == {
        "job_id": flow.jobs["load"],
        "workflow": {"id": flow.id, "kind": "workflow", "name": "diamond", "node_key": "load"},
    }
    assert of_member["workflow"]["kind"] == "batch" and of_member["workflow"]["node_key"] is None
    assert of_plain == {"job_id": plain, "workflow": None}
    assert missing.status_code == 404


def test_another_tenants_workflow_reads_exactly_like_a_missing_one(
    db_url: str, conn: psycopg.Connection, tenant: Tenant, worker: int, viewer: User
) -> None:
    mine = diamond(conn, tenant, worker, run=False)
    other = make_tenant(conn)
    other_worker = setup_project(conn, other)
    theirs = diamond(conn, other, other_worker, name="b-only")
    with web_client(db_url) as client:
        listed = _data(_get(client, "/api/v1/workflows", viewer))
        foreign = _get(client, f"/api/v1/workflows/{theirs.id}", viewer)
        missing = _get(client, "/api/v1/workflows/8999999999", viewer)
        beyond = _get(client, f"/api/v1/workflows/{2**63}", viewer)
        foreign_job = _get(client, f"/api/v1/jobs/{theirs.jobs['load']}/workflow", viewer)
    assert [w["id"] for w in listed] == [mine.id]
    for answer in (foreign, missing, beyond):
        assert answer.status_code == 404
        assert answer.json()["error"]["code"] == "not_found"
        assert answer.json()["error"]["message"] == "workflow not found"
    assert foreign_job.status_code == 404
    assert "b-only" not in foreign.text + foreign_job.text


@pytest.mark.parametrize(
    ("path", "params"),
    [
        ("/api/v1/workflows", {"kind": "dag"}),
        ("/api/v1/workflows", {"state": "stuck"}),
        ("/api/v1/workflows", {"limit": "0"}),
        ("/api/v1/workflows", {"limit": "201"}),
        ("/api/v1/workflows", {"cursor": "not-a-cursor!"}),
        ("/api/v1/workflows", {"name": "x"}),
        ("/api/v1/workflows/1", {"max_nodes": "0"}),
        ("/api/v1/workflows/1", {"max_nodes": "10001"}),
        ("/api/v1/workflows/1", {"max_nodes": "lots"}),
    ],
)
def test_bad_query_parameters_are_422(
    db_url: str, conn: psycopg.Connection, viewer: User, path: str, params: dict[str, str]
) -> None:
    with web_client(db_url) as client:
        answer = _get(client, path, viewer, **params)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["code"] in {"validation_failed", "invalid_cursor"}


def test_viewers_and_viewer_keys_read_and_no_credential_is_401(
    db_url: str, conn: psycopg.Connection, tenant: Tenant, worker: int
) -> None:
    flow = diamond(conn, tenant, worker, run=False)
    key = bearer(api_key(conn, tenant, Role.VIEWER))
    with web_client(db_url) as client:
        for path in (
            "/api/v1/workflows",
            f"/api/v1/workflows/{flow.id}",
            f"/api/v1/jobs/{flow.jobs['load']}/workflow",
        ):
            assert _get(client, path, key).status_code == 200, path
            assert client.get(path).status_code == 401, path


def test_the_routes_are_in_the_openapi_document(db_url: str) -> None:
    with web_client(db_url) as client:
        document = client.get("/api/v1/openapi.json").json()
    listed = document["paths"]["/api/v1/workflows"]["get"]
    one_workflow = document["paths"]["/api/v1/workflows/{workflow_id}"]["get"]
    assert {p["name"] for p in listed["parameters"]} >= {"kind", "state", "limit", "cursor"}
    assert {p["name"] for p in one_workflow["parameters"]} >= {"workflow_id", "max_nodes"}
    assert {"200", "404", "422"} <= set(one_workflow["responses"])
    assert "/api/v1/jobs/{job_id}/workflow" in document["paths"]


def test_a_ten_thousand_node_fan_out_is_read_whole_in_one_answer(
    db_url: str, conn: psycopg.Connection, tenant: Tenant, worker: int, viewer: User
) -> None:
    nodes = [node("root")] + [node(f"leaf-{i}", "root") for i in range(9_999)]
    flow = enqueue_workflow(conn, tenant, nodes, name="fan-out")
    with web_client(db_url) as client:
        started = time.perf_counter()
        detail = _data(_get(client, f"/api/v1/workflows/{flow.id}", viewer))
        took = time.perf_counter() - started
    print(f"\n10,000-node workflow read over HTTP in {took * 1000:.0f} ms")
    assert len(detail["nodes"]) == 10_000 and len(detail["edges"]) == 9_999
    assert detail["nodes_truncated"] is False and detail["edges_truncated"] is False
    assert detail["counts"]["waiting"] == 9_999 and detail["state"] == "running"
