"""Every API route and every dashboard page on a real Citus cluster, as codity_app, per tenant.

Two tenants, A and B, each with eight queues spread over both worker nodes; jobs enqueued
both through the by-queue body (sent whole to its node: ids from that node's range) and by
name in a transaction (ids from the coordinator's range); a worker holding, completing,
releasing and dead-lettering jobs; a schedule that has run; a fence rejection. The web app
logs in as a real login granted codity_app only, as a deployment's DATABASE_URL does.

- Every route of ``ALL_ROUTES`` and every page of ``DASHBOARD_PAGES`` is in a table here
  (a new one fails the coverage test until it is added), answers with the status it answers
  on one server, and with content: where the tenant has rows, an empty answer is a failure
  (on a cluster, row-level security that never saw the tenant answers no rows and no error).
- No answer to A ever holds B's rows or names, across nodes; B's own reads see B's rows.
- The bulk actions bounded by a dry run leave out rows that arrive after it even when they
  draw a lower id (rule 5): on the cluster, ids really come from per-node ranges.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb
from starlette.testclient import TestClient

from codity.web.access import Role, Scope
from codity.web.app import create_app
from codity.web.dashboard.routes import DASHBOARD_PAGES
from codity.web.routes import ALL_ROUTES
from tests.citus import CitusCluster
from tests.dashboard import Session, sign_in
from tests.logins import login_role
from tests.sqlapi import one, row
from tests.webapp import SETTINGS, Tenant, User, add_user, api_key, bearer, make_tenant

pytestmark = pytest.mark.citus

QUEUES = 8
NODE_RANGE = 2**48
"""Ids drawn on a worker node are at least this (the node's group id shifted by 48 bits)."""
FOREIGN = "b-only"


@dataclass
class Side:
    tenant: Tenant
    mark: str
    users: dict[Role, User]
    keys: dict[Role, str]
    queues: list[str]
    queue_ids: list[int]
    jobs: set[int] = field(default_factory=set)
    dead_letter: int = 0
    dead_job: int = 0
    held_job: int = 0
    worker: int = 0
    extra_project: int = 0
    spare_user: int = 0
    workflow: int = 0
    nodes: dict[str, int] = field(default_factory=dict)
    """The workflow's nodes (first -> mid -> last, over three queues) by key: job ids."""
    batch: int = 0

    def q(self, n: int) -> str:
        return self.queues[n]


def _side(conn: psycopg.Connection[Any], slug: str, mark: str) -> Side:
    tenant = make_tenant(conn, slug)
    p = tenant.project_id
    users = {role: add_user(conn, tenant, role) for role in Role}
    keys = {role: api_key(conn, tenant, role) for role in (Role.ADMIN, Role.VIEWER)}
    names = [f"{mark}-q{n}" for n in range(QUEUES)]
    ids = [
        one(conn, "SELECT queue_id FROM codity.create_queue(%s, %s, 1)", [name, p])
        for name in names
    ]
    side = Side(tenant, mark, users, keys, names, ids)
    for queue_id in ids:
        # The body by queue id, outside a transaction: delegated to the queue's node.
        specs = Jsonb(
            [{"task": f"{mark}.send", "payload": {"tenant": mark, "n": n}} for n in range(3)]
        )
        found = conn.execute(
            "SELECT job_id FROM codity.enqueue_many_in_queue(%s, %s)", [queue_id, specs]
        ).fetchall()
        side.jobs |= {r[0] for r in found}
    with conn.transaction():  # by name, in a transaction: run on the coordinator
        for name in names:
            side.jobs.add(
                one(
                    conn,
                    "SELECT job_id FROM codity.enqueue(%s, %s, %s, p_project_id => %s)",
                    [name, f"{mark}.send", Jsonb({"tenant": mark}), p],
                )
            )
    side.worker = one(
        conn, "SELECT codity.register_worker('w', %s, 10, 'h', 1, %s)", [[names[0]], p]
    )
    held = conn.execute(
        "SELECT job_id, fence FROM codity.claim(%s, %s, 4)", [side.worker, names[0]]
    ).fetchall()
    for job, fence in held:
        conn.execute("SELECT * FROM codity.start(%s, %s)", [job, fence])
    (done, done_fence), (dead, dead_fence), (back, back_fence), (kept, _) = held
    conn.execute("SELECT * FROM codity.complete(%s, %s)", [done, done_fence])
    conn.execute("SELECT * FROM codity.fail(%s, %s, 'boom')", [dead, dead_fence])
    conn.execute("SELECT * FROM codity.release(%s, %s)", [back, back_fence])
    conn.execute("SELECT * FROM codity.complete(%s, %s)", [done, done_fence + 7])  # stale
    side.dead_job, side.held_job = dead, kept
    side.dead_letter = one(conn, "SELECT id FROM codity.dead_letters WHERE job_id = %s", [dead])
    conn.execute(
        "SELECT * FROM codity.create_schedule('nightly', %s, '0 2 * * *', 't', '{}', 'UTC', 0, %s)",
        [names[1], p],
    )
    # Its timetable comes due: the cron job it enqueues is its last job; then one run by hand.
    conn.execute(
        "UPDATE codity.scheduled_jobs SET next_run_at = now() - interval '1 minute'"
        " WHERE project_id = %s",
        [p],
    )
    conn.execute("SELECT codity.materialize_cron()")
    side.jobs.add(
        one(conn, "SELECT last_job_id FROM codity.scheduled_jobs WHERE project_id = %s", [p])
    )
    side.jobs.add(one(conn, "SELECT codity.run_schedule_now('nightly', %s)", [p]))
    # A workflow over three queues (shards on both nodes) and an open batch over two.
    flow = {
        "name": f"{mark}-flow",
        "nodes": [
            {"key": "first", "queue": names[2], "task": f"{mark}.first"},
            {"key": "mid", "queue": names[3], "task": f"{mark}.mid", "after": ["first"]},
            {"key": "last", "queue": names[4], "task": f"{mark}.last", "after": ["mid"]},
        ],
    }
    made = conn.execute(
        "SELECT workflow_id, node_key, job_id FROM codity.enqueue_workflow(%s, %s)",
        [Jsonb(flow), p],
    ).fetchall()
    side.workflow, side.nodes = made[0][0], {key: job for _, key, job in made}
    batch = {
        "name": f"{mark}-batch",
        "open": True,
        "jobs": [{"queue": names[5], "task": f"{mark}.member"}],
        "callbacks": {"all_done": {"queue": names[6], "task": f"{mark}.done"}},
    }
    members = conn.execute(
        "SELECT batch_id, job_id FROM codity.create_batch(%s, %s)", [Jsonb(batch), p]
    ).fetchall()
    side.batch = members[0][0]
    side.jobs |= set(side.nodes.values()) | {job for _, job in members}
    side.extra_project = one(
        conn,
        "INSERT INTO codity.projects (org_id, slug, name) VALUES (%s, 'extra', 'Extra')"
        " RETURNING id",
        [tenant.org_id],
    )
    side.spare_user = add_user(conn, tenant, Role.VIEWER).user_id
    return side


@dataclass
class World:
    a: Side
    b: Side
    database: str


@pytest.fixture(scope="module")
def world(citus_cluster: CitusCluster, citus_template: str) -> Iterator[World]:
    """The two tenants, built once into a distributed database of this module."""
    name = f"codity_cw_{uuid.uuid4().hex[:10]}"
    url = citus_cluster.clone(citus_template, name)
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO codity.users (email, password_hash) VALUES ('outsider@x.test', 'x')"
            )
            made = World(_side(conn, "org-a", "a"), _side(conn, "org-b", FOREIGN), name)
        yield made
    finally:
        citus_cluster.drop(name)


@pytest.fixture
def world_url(citus_cluster: CitusCluster, world: World) -> Iterator[str]:
    """A copy of the world of this test's own (its requests write)."""
    with citus_cluster.database(world.database, f"codity_cw_{uuid.uuid4().hex[:10]}") as url:
        yield url


@pytest.fixture
def app_client(world_url: str) -> Iterator[TestClient]:
    """The web app on the cluster, logged in as a role holding codity_app only."""
    with (
        login_role(world_url, "codity_app") as url,
        TestClient(create_app(url, SETTINGS)) as client,
    ):
        yield client


def _data(response: Any) -> Any:
    assert response.status_code < 300, response.text[:500]
    return response.json()["data"]


def _ids(rows: list[dict[str, Any]], key: str = "id") -> set[int]:
    return {int(r[key]) for r in rows}


def test_the_world_spreads_over_both_worker_nodes_with_ids_of_both_ranges(
    citus_cluster: CitusCluster, world: World
) -> None:
    for side in (world.a, world.b):
        ports = {
            citus_cluster.node_port_of(world.database, "codity.jobs", q) for q in side.queue_ids
        }
        assert len(ports) >= 2, f"{side.mark}'s queues all live on one node: {ports}"
        assert any(j >= NODE_RANGE for j in side.jobs), "no job drawn on a worker node"
        assert any(j < NODE_RANGE for j in side.jobs), "no job drawn on the coordinator"


# ---------------------------------------------------------------------------------------
# Reads: every GET route, with content
# ---------------------------------------------------------------------------------------

Check = Callable[[TestClient, dict[str, str], Side], None]


def _all_jobs(client: TestClient, headers: dict[str, str], **query: Any) -> list[dict[str, Any]]:
    """Every page of GET /api/v1/jobs, following the cursors."""
    found: list[dict[str, Any]] = []
    cursor = None
    while True:
        params = {"limit": 7, **query, **({"cursor": cursor} if cursor else {})}
        got = client.get("/api/v1/jobs", params=params, headers=headers)
        found += _data(got)
        cursor = got.json()["meta"]["next_cursor"]
        if cursor is None:
            return found


def _jobs(client: TestClient, headers: dict[str, str], side: Side) -> None:
    pages = _all_jobs(client, headers)
    assert len(pages) == len(_ids(pages)), "a job came twice across the pages"
    assert _ids(pages) == side.jobs, "the pages are not exactly the tenant's jobs"
    first = client.get("/api/v1/jobs", headers=headers).json()["meta"]
    assert first["count"] == len(side.jobs)
    payload = _all_jobs(client, headers, payload='{"n": 1}')
    assert payload and all(j["id"] in side.jobs for j in payload)
    running = _data(client.get("/api/v1/jobs", params={"status": "running"}, headers=headers))
    assert _ids(running) == {side.held_job}


def _counts(client: TestClient, headers: dict[str, str], side: Side) -> None:
    counts = {
        c["state"]: c["count"] for c in _data(client.get("/api/v1/jobs/counts", headers=headers))
    }
    assert counts["all"] == len(side.jobs) and counts["dead_letter"] == 1


def _job(client: TestClient, headers: dict[str, str], side: Side) -> None:
    job = _data(client.get(f"/api/v1/jobs/{side.dead_job}", headers=headers))
    assert job["status"] == "dead_letter" and job["executions"] and job["dead_letters"]
    node_job = max(side.jobs)
    assert _data(client.get(f"/api/v1/jobs/{node_job}", headers=headers))["id"] == node_job


def _dead_letters(client: TestClient, headers: dict[str, str], side: Side) -> None:
    letters = _data(client.get("/api/v1/dead-letters", headers=headers))
    assert _ids(letters) == {side.dead_letter}


def _dead_letter(client: TestClient, headers: dict[str, str], side: Side) -> None:
    letter = _data(client.get(f"/api/v1/dead-letters/{side.dead_letter}", headers=headers))
    assert letter["job_id"] == side.dead_job and letter["payload"]["tenant"] == side.mark


def _queues(client: TestClient, headers: dict[str, str], side: Side) -> None:
    assert [q["name"] for q in _data(client.get("/api/v1/queues", headers=headers))] == side.queues


def _queue(client: TestClient, headers: dict[str, str], side: Side) -> None:
    assert _data(client.get(f"/api/v1/queues/{side.q(2)}", headers=headers))["name"] == side.q(2)


def _stats(client: TestClient, headers: dict[str, str], side: Side) -> None:
    stats = _data(client.get(f"/api/v1/queues/{side.q(0)}/stats", headers=headers))
    assert (stats["running"], stats["dead_letter"], stats["completed"]) == (1, 1, 1)
    assert stats["claimable"] >= 1


def _history(client: TestClient, headers: dict[str, str], side: Side) -> None:
    history = _data(client.get(f"/api/v1/queues/{side.q(0)}/history", headers=headers))
    assert len(history["points"]) == 60


def _workers(client: TestClient, headers: dict[str, str], side: Side) -> None:
    workers = _data(client.get("/api/v1/workers", headers=headers))
    assert [(w["id"], w["jobs_held"]) for w in workers] == [(side.worker, 1)]


def _worker(client: TestClient, headers: dict[str, str], side: Side) -> None:
    worker = _data(client.get(f"/api/v1/workers/{side.worker}", headers=headers))
    assert _ids(worker["held_jobs"]) == {side.held_job}
    assert [r["status"] for r in worker["returned_jobs"]] == ["released"]


def _overview(client: TestClient, headers: dict[str, str], side: Side) -> None:
    seen = _data(client.get("/api/v1/overview", headers=headers))
    assert sorted(q["queue"] for q in seen["queues"]) == side.queues
    # The overview counts jobs a worker could take or holds, or that finished: a workflow's
    # nodes waiting on their parents (mid, last, the batch's callback) are not among them.
    assert seen["totals"]["total"] == len(side.jobs) - 3
    assert (seen["workers_alive"], seen["dead_letters_unreplayed"]) == (1, 1)
    rising = [p["code"] for q in seen["queues"] for p in q["problems"]]
    assert "dead_letters_rising" in rising


def _schedules(client: TestClient, headers: dict[str, str], side: Side) -> None:
    (schedule,) = _data(client.get("/api/v1/schedules", headers=headers))
    assert (schedule["name"], schedule["last_job_status"]) == ("nightly", "queued")


def _schedule(client: TestClient, headers: dict[str, str], side: Side) -> None:
    schedule = _data(client.get("/api/v1/schedules/nightly", headers=headers))
    assert schedule["queue"] == side.q(1) and schedule["last_job_status"] == "queued"


def _next_runs(client: TestClient, headers: dict[str, str], side: Side) -> None:
    assert _data(client.get("/api/v1/schedules/nightly/next-runs", headers=headers))["runs"]


def _schedule_jobs(client: TestClient, headers: dict[str, str], side: Side) -> None:
    jobs = _data(client.get("/api/v1/schedules/nightly/jobs", headers=headers))
    assert len(jobs) == 2 and all(j["id"] in side.jobs and j["queue"] == side.q(1) for j in jobs)


def _metrics(client: TestClient, headers: dict[str, str], side: Side) -> None:
    got = client.get("/api/v1/metrics", headers=headers)
    assert got.status_code == 200
    text = got.text
    assert f'codity_queue_jobs{{queue="{side.q(0)}",state="running"}} 1.0' in text
    assert f'codity_jobs_dead_lettered_total{{queue="{side.q(0)}"}} 1.0' in text
    assert 'codity_workers{state="alive"} 1.0' in text


def _me(client: TestClient, headers: dict[str, str], side: Side) -> None:
    me = _data(client.get("/api/v1/auth/me", headers=headers))
    assert [m["org_id"] for m in me["memberships"]] == [side.tenant.org_id]


def _org(client: TestClient, headers: dict[str, str], side: Side) -> None:
    assert _data(client.get("/api/v1/org", headers=headers))["slug"] == side.tenant.slug


def _projects(client: TestClient, headers: dict[str, str], side: Side) -> None:
    projects = _ids(_data(client.get("/api/v1/projects", headers=headers)))
    assert projects == {side.tenant.project_id, side.extra_project}


def _project(client: TestClient, headers: dict[str, str], side: Side) -> None:
    got = _data(client.get(f"/api/v1/projects/{side.extra_project}", headers=headers))
    assert got["slug"] == "extra"


def _members(client: TestClient, headers: dict[str, str], side: Side) -> None:
    members = _ids(_data(client.get("/api/v1/members", headers=headers)), "user_id")
    assert members == {u.user_id for u in side.users.values()} | {side.spare_user}


def _api_keys(client: TestClient, headers: dict[str, str], side: Side) -> None:
    assert len(_data(client.get("/api/v1/api-keys", headers=headers))) == 2


def _workflows(client: TestClient, headers: dict[str, str], side: Side) -> None:
    listed = _data(client.get("/api/v1/workflows", headers=headers))
    assert {(w["id"], w["kind"], w["state"]) for w in listed} == {
        (side.workflow, "workflow", "running"),
        (side.batch, "batch", "open"),
    }


def _workflow(client: TestClient, headers: dict[str, str], side: Side) -> None:
    flow = _data(client.get(f"/api/v1/workflows/{side.workflow}", headers=headers))
    assert {n["node_key"]: (n["id"], n["status"]) for n in flow["nodes"]} == {
        "first": (side.nodes["first"], "queued"),
        "mid": (side.nodes["mid"], "waiting"),
        "last": (side.nodes["last"], "waiting"),
    }
    assert {(e["parent_id"], e["child_id"]) for e in flow["edges"]} == {
        (side.nodes["first"], side.nodes["mid"]),
        (side.nodes["mid"], side.nodes["last"]),
    }


def _job_workflow(client: TestClient, headers: dict[str, str], side: Side) -> None:
    got = _data(client.get(f"/api/v1/jobs/{side.nodes['mid']}/workflow", headers=headers))
    assert (got["workflow"]["id"], got["workflow"]["node_key"]) == (side.workflow, "mid")


READS: dict[str, Check] = {
    "GET /api/v1/auth/me": _me,
    "GET /api/v1/queues": _queues,
    "GET /api/v1/queues/{name}": _queue,
    "GET /api/v1/queues/{name}/stats": _stats,
    "GET /api/v1/queues/{name}/history": _history,
    "GET /api/v1/jobs": _jobs,
    "GET /api/v1/jobs/counts": _counts,
    "GET /api/v1/jobs/{job_id:int}": _job,
    "GET /api/v1/dead-letters": _dead_letters,
    "GET /api/v1/dead-letters/{dead_letter_id:int}": _dead_letter,
    "GET /api/v1/workers": _workers,
    "GET /api/v1/workers/{worker_id:int}": _worker,
    "GET /api/v1/overview": _overview,
    "GET /api/v1/schedules": _schedules,
    "GET /api/v1/schedules/{name}": _schedule,
    "GET /api/v1/schedules/{name}/next-runs": _next_runs,
    "GET /api/v1/schedules/{name}/jobs": _schedule_jobs,
    "GET /api/v1/org": _org,
    "GET /api/v1/projects": _projects,
    "GET /api/v1/projects/{project_id:int}": _project,
    "GET /api/v1/members": _members,
    "GET /api/v1/api-keys": _api_keys,
    "GET /api/v1/metrics": _metrics,
    "GET /api/v1/workflows": _workflows,
    "GET /api/v1/workflows/{workflow_id:int}": _workflow,
    "GET /api/v1/jobs/{job_id:int}/workflow": _job_workflow,
}
"""Every GET route that needs a credential, and what it must answer on the cluster."""

PUBLIC_READS = ("/healthz", "/livez", "/readyz", "/api/v1/openapi.json", "/api/v1/docs")


def _headers(side: Side, name: str) -> dict[str, str]:
    """The lowest credential the route takes: a viewer key where keys may call it, else
    the lowest user role it allows."""
    entry = next(e for e in ALL_ROUTES if e.name == name)
    if entry.scope is Scope.PROJECT and entry.api_keys:
        return bearer(side.keys[Role.VIEWER])
    role = entry.min_role or Role.VIEWER
    return side.users[role].headers


def test_every_read_route_is_in_the_table() -> None:
    reads = {e.name for e in ALL_ROUTES if e.method == "GET" and e.scope is not Scope.PUBLIC}
    assert reads == set(READS)
    public = {e.path for e in ALL_ROUTES if e.method == "GET" and e.scope is Scope.PUBLIC}
    assert public - set(PUBLIC_READS) == {"/api/v1/docs/init.js"}


def test_the_public_routes_answer_on_the_cluster(world_url: str) -> None:
    """As the database's owner: /readyz reads yoyo's own table, which a login holding only
    codity_app may not read on one server either."""
    with TestClient(create_app(world_url, SETTINGS)) as client:
        for path in PUBLIC_READS:
            assert client.get(path).status_code == 200, path
        assert client.get("/readyz").json()["data"]["migrations_pending"] == []


def test_every_read_route_answers_each_tenant_its_own_rows(
    app_client: TestClient, world: World
) -> None:
    for side, other in ((world.a, world.b), (world.b, world.a)):
        for name, check in READS.items():
            headers = _headers(side, name)
            check(app_client, headers, side)
            # Nothing of the other tenant in any answer of this one, by name or by id.
            entry = next(e for e in ALL_ROUTES if e.name == name)
            if "{" not in entry.path:
                text = app_client.get(entry.path, headers=headers).text
                assert f'"{other.mark}-q' not in text and f'queue="{other.mark}-q' not in text
                # Ids drawn on a worker node are long enough not to match anything else.
                assert not any(str(j) in text for j in other.jobs if j >= NODE_RANGE), name


def test_another_tenants_rows_read_as_missing_across_nodes(
    app_client: TestClient, world: World
) -> None:
    a, b = world.a, world.b
    headers = bearer(a.keys[Role.VIEWER])
    for path in (
        f"/api/v1/jobs/{max(b.jobs)}",
        f"/api/v1/jobs/{min(b.jobs)}",
        f"/api/v1/dead-letters/{b.dead_letter}",
        f"/api/v1/workers/{b.worker}",
        f"/api/v1/queues/{b.q(0)}/stats",
    ):
        assert app_client.get(path, headers=headers).status_code == 404, path
    assert _data(app_client.get("/api/v1/jobs", params={"id": max(b.jobs)}, headers=headers)) == []


# ---------------------------------------------------------------------------------------
# Writes: every other route, in an order that leaves each something to act on
# ---------------------------------------------------------------------------------------


def _b_rows(url: str, b: Side) -> tuple[Any, ...]:
    """B's jobs and dead letters as they stand, to show A's writes never reach them."""
    with psycopg.connect(url, autocommit=True) as conn:
        return row(
            conn,
            "SELECT (SELECT string_agg(j::text, ',' ORDER BY j.id) FROM codity.jobs j"
            "        WHERE j.project_id = %(p)s),"
            "       (SELECT string_agg(d::text, ',' ORDER BY d.id) FROM codity.dead_letters d"
            "        JOIN codity.queues q ON q.id = d.queue_id WHERE q.project_id = %(p)s),"
            "       (SELECT string_agg(q::text, ',' ORDER BY q.id) FROM codity.queues q"
            "        WHERE q.project_id = %(p)s)",
            {"p": b.tenant.project_id},
        )


WRITES = {
    "POST /api/v1/queues",
    "PATCH /api/v1/queues/{name}",
    "DELETE /api/v1/queues/{name}",
    "POST /api/v1/queues/{name}/pause",
    "POST /api/v1/queues/{name}/resume",
    "POST /api/v1/jobs",
    "POST /api/v1/jobs/batch",
    "POST /api/v1/jobs/{job_id:int}/cancel",
    "POST /api/v1/jobs/{job_id:int}/retry",
    "POST /api/v1/jobs/bulk",
    "POST /api/v1/dead-letters/{dead_letter_id:int}/replay",
    "POST /api/v1/dead-letters/replay",
    "POST /api/v1/schedules",
    "PATCH /api/v1/schedules/{name}",
    "DELETE /api/v1/schedules/{name}",
    "POST /api/v1/schedules/{name}/pause",
    "POST /api/v1/schedules/{name}/resume",
    "POST /api/v1/schedules/{name}/run",
    "PATCH /api/v1/org",
    "POST /api/v1/projects",
    "PATCH /api/v1/projects/{project_id:int}",
    "DELETE /api/v1/projects/{project_id:int}",
    "POST /api/v1/members",
    "PATCH /api/v1/members/{user_id:int}",
    "DELETE /api/v1/members/{user_id:int}",
    "POST /api/v1/org/leave",
    "POST /api/v1/api-keys",
    "DELETE /api/v1/api-keys/{key_id:int}",
    "POST /api/v1/auth/register",
    "POST /api/v1/auth/login",
    "POST /api/v1/auth/refresh",
    "POST /api/v1/auth/logout",
    "POST /api/v1/auth/switch",
    "POST /api/v1/workflows",
    "POST /api/v1/workflows/{workflow_id:int}/cancel",
    "POST /api/v1/workflows/{workflow_id:int}/retry",
    "POST /api/v1/workflows/{workflow_id:int}/nodes/{node_key}/skip",
    "POST /api/v1/batches",
    "POST /api/v1/batches/{batch_id:int}/jobs",
    "POST /api/v1/batches/{batch_id:int}/seal",
}
"""Every route that is not a GET; test_every_write_route_answers_on_the_cluster calls each."""


def test_every_write_route_is_in_the_table() -> None:
    assert {e.name for e in ALL_ROUTES if e.method != "GET"} == WRITES


def test_every_write_route_answers_on_the_cluster(
    app_client: TestClient, world_url: str, world: World
) -> None:
    a, b = world.a, world.b
    admin, owner = a.users[Role.ADMIN].headers, a.users[Role.OWNER].headers
    member = bearer(a.keys[Role.ADMIN])
    before = _b_rows(world_url, b)
    called: set[str] = set()

    def send(method: str, path: str, headers: dict[str, str], status: int, **kw: Any) -> Any:
        route = re.sub(r"/(\d+|a-q\d|nightly|reports|digest|mid)(?=/|$)", "/X", path)
        called.add(f"{method} {route}")
        got = app_client.request(method, path, headers=headers, **kw)
        assert got.status_code == status, f"{method} {path}: {got.text[:400]}"
        return got.json().get("data") if got.content else None

    # Queues.
    made = send("POST", "/api/v1/queues", admin, 201, json={"name": "reports"})
    assert made["name"] == "reports"
    assert (
        send("PATCH", "/api/v1/queues/reports", admin, 200, json={"max_attempts": 7})[
            "max_attempts"
        ]
        == 7
    )
    assert send("POST", f"/api/v1/queues/{a.q(3)}/pause", admin, 200)["changed"]
    assert send("POST", f"/api/v1/queues/{a.q(3)}/resume", admin, 200)["changed"]
    # Jobs: enqueue answers the job as written (read back after the commit).
    job = send(
        "POST",
        "/api/v1/jobs",
        member,
        201,
        json={"queue": a.q(4), "task": "t", "payload": {"k": 1}},
    )
    assert (job["status"], job["payload"], job["queue"]) == ("queued", {"k": 1}, a.q(4))
    again = send(
        "POST", "/api/v1/jobs", member, 201,
        json={"queue": a.q(4), "task": "t", "idempotency_key": "once"},
    )  # fmt: skip
    assert send(
        "POST", "/api/v1/jobs", member, 200,
        json={"queue": a.q(4), "task": "t", "idempotency_key": "once"},
    )["id"] == again["id"]  # fmt: skip
    batch = send(
        "POST", "/api/v1/jobs/batch", member, 201,
        json={"queue": a.q(5), "jobs": [{"task": "t"}, {"task": "t", "delay_ms": 60000}]},
    )  # fmt: skip
    assert [i["status"] for i in batch] == ["queued", "scheduled"]
    cancelled = send("POST", f"/api/v1/jobs/{job['id']}/cancel", member, 200)
    assert (cancelled["id"], cancelled["status"]) == (job["id"], "cancelled")
    retried = send("POST", f"/api/v1/jobs/{a.dead_job}/retry", member, 200)
    assert (retried["id"], retried["status"]) == (a.dead_job, "queued")
    # Bulk by ids (another tenant's ids are skipped), then by filter with a dry run's as_of.
    ids = [max(a.jobs - {a.held_job, a.dead_job}), max(b.jobs)]
    by_ids = send("POST", "/api/v1/jobs/bulk", member, 200, json={"action": "cancel", "ids": ids})
    assert (by_ids["affected"], by_ids["skipped"]) == (1, 1)
    scope = {"queue": a.q(6), "status": "queued"}
    dry = send(
        "POST", "/api/v1/jobs/bulk", admin, 200,
        json={"action": "cancel", "filter": scope, "dry_run": True},
    )  # fmt: skip
    assert dry["matched"] >= 1 and dry["as_of"]
    run = send(
        "POST", "/api/v1/jobs/bulk", admin, 200,
        json={"action": "cancel", "filter": scope, "as_of": dry["as_of"]},
    )  # fmt: skip
    assert run["affected"] == dry["matched"]
    # Dead letters: one more, replayed by id; then replay-all, dry run first.
    send("POST", f"/api/v1/dead-letters/{a.dead_letter}/replay", member, 409)
    dry = send("POST", "/api/v1/dead-letters/replay", admin, 200, json={"dry_run": True})
    assert dry["count"] == 0 and dry["as_of"]
    send("POST", "/api/v1/dead-letters/replay", admin, 200, json={"as_of": dry["as_of"]})
    # Workflows and batches: a graph over two nodes' shards, acted on; a batch grown, sealed.
    graph = {
        "nodes": [
            {"key": "first", "queue": a.q(2), "task": "t"},
            {"key": "mid", "queue": a.q(3), "task": "t", "after": ["first"]},
            {"key": "last", "queue": a.q(4), "task": "t", "after": ["mid"]},
        ]
    }
    flow = send("POST", "/api/v1/workflows", member, 201, json=graph)
    statuses = {n["node_key"]: n["status"] for n in flow["nodes"]}
    assert statuses == {"first": "queued", "mid": "waiting", "last": "waiting"}
    base = f"/api/v1/workflows/{flow['id']}"
    skipped = send("POST", base + "/nodes/mid/skip", member, 200)
    assert {n["node_key"]: n["status"] for n in skipped["nodes"]}["mid"] == "completed"
    assert send("POST", base + "/cancel", member, 200)["state"] == "failed"
    retried = send("POST", base + "/retry", member, 200, json={"mode": "failed"})
    assert retried["state"] == "running"
    opened = send(
        "POST", "/api/v1/batches", member, 201,
        json={"open": True, "jobs": [{"queue": a.q(5), "task": "t"}],
              "callbacks": {"all_done": {"queue": a.q(6), "task": "t"}}},
    )  # fmt: skip
    added = send(
        "POST", f"/api/v1/batches/{opened['id']}/jobs", member, 201,
        json={"jobs": [{"queue": a.q(7), "task": "t"}]},
    )  # fmt: skip
    assert len(added) == 1
    sealed = send("POST", f"/api/v1/batches/{opened['id']}/seal", member, 200)
    assert sealed["sealed_at"] is not None and sealed["state"] == "running"
    # Schedules.
    digest = {"name": "digest", "queue": a.q(1), "cron": "0 3 * * *", "task": "t"}
    assert send("POST", "/api/v1/schedules", admin, 201, json=digest)["name"] == "digest"
    assert (
        send("PATCH", "/api/v1/schedules/digest", admin, 200, json={"cron": "0 4 * * *"})["cron"]
        == "0 4 * * *"
    )
    assert send("POST", "/api/v1/schedules/digest/pause", admin, 200)["changed"]
    assert send("POST", "/api/v1/schedules/digest/resume", admin, 200)["changed"]
    ran = send("POST", "/api/v1/schedules/nightly/run", member, 201)
    assert ran["schedule"] == "nightly"
    send("DELETE", "/api/v1/schedules/digest", admin, 204)
    send("DELETE", "/api/v1/queues/reports", admin, 204)
    # The org, its projects, members and keys.
    assert send("PATCH", "/api/v1/org", owner, 200, json={"name": "Acme"})["name"] == "Acme"
    project = send("POST", "/api/v1/projects", admin, 201, json={"slug": "eu", "name": "EU"})
    assert (
        send("PATCH", f"/api/v1/projects/{project['id']}", admin, 200, json={"name": "E"})["name"]
        == "E"
    )
    send("DELETE", f"/api/v1/projects/{project['id']}", owner, 204)
    added = send(
        "POST", "/api/v1/members", admin, 201, json={"email": "outsider@x.test", "role": "member"}
    )
    send("PATCH", f"/api/v1/members/{added['user_id']}", admin, 200, json={"role": "viewer"})
    send("DELETE", f"/api/v1/members/{added['user_id']}", admin, 204)
    key = send("POST", "/api/v1/api-keys", admin, 201, json={"name": "k", "role": "viewer"})
    assert key["key"] and key["role"] == "viewer"
    send("DELETE", f"/api/v1/api-keys/{key['id']}", admin, 204)
    send("DELETE", f"/api/v1/api-keys/{key['id']}", admin, 204)  # again: idempotent
    # Sign-in and sessions.
    user = {"email": "new@x.test", "password": "a long enough password", "org_name": "New"}
    send("POST", "/api/v1/auth/register", {}, 201, json=user)
    tokens = send(
        "POST", "/api/v1/auth/login", {}, 200, json={k: user[k] for k in ("email", "password")}
    )
    fresh = send(
        "POST", "/api/v1/auth/refresh", {}, 200, json={"refresh_token": tokens["refresh_token"]}
    )
    mine = bearer(fresh["access_token"])
    send("POST", "/api/v1/auth/switch", mine, 200, json={"project_id": fresh["project_id"]})
    send("POST", "/api/v1/auth/logout", mine, 204, json={"refresh_token": fresh["refresh_token"]})
    send("POST", "/api/v1/org/leave", a.users[Role.VIEWER].headers, 204)

    assert _b_rows(world_url, b) == before, "a write of A's changed B's rows"
    assert {re.sub(r"\{(\w+)(:int)?\}", "X", name) for name in WRITES} == called


# ---------------------------------------------------------------------------------------
# Dashboard pages
# ---------------------------------------------------------------------------------------

SKIPPED_PAGES = {"GET /events": "a server-sent stream that never ends (tested on one server)"}


def _page_path(path: str, side: Side) -> str:
    values = {
        "name": side.q(0),
        "job_id": side.dead_job,
        "dead_letter_id": side.dead_letter,
        "worker_id": side.worker,
        "workflow_id": side.workflow,
    }
    if path.startswith(("/schedules/", "/fragments/schedules/")):
        values["name"] = "nightly"
    return re.sub(r"\{(\w+)(?::\w+)?\}", lambda m: str(values[m.group(1)]), path)


PAGE_CONTENT: dict[str, Callable[[Side], list[str]]] = {
    "/": lambda s: [s.q(0), s.q(7)],
    "/fragments/overview": lambda s: [s.q(0)],
    "/queues": lambda s: [s.q(0), s.q(7)],
    "/fragments/queues": lambda s: [s.q(0)],
    "/queues/{name}": lambda s: [s.q(0)],
    "/fragments/queues/{name}": lambda s: ["1"],
    "/jobs": lambda s: [f"/jobs/{max(s.jobs)}"],
    "/fragments/jobs": lambda s: [f"/jobs/{max(s.jobs)}"],
    "/jobs/{job_id:int}": lambda s: [str(s.dead_job), "boom"],
    "/fragments/jobs/{job_id:int}": lambda s: ["boom"],
    "/dead-letters": lambda s: [f"/dead-letters/{s.dead_letter}"],
    "/fragments/dead-letters": lambda s: [f"/dead-letters/{s.dead_letter}"],
    "/dead-letters/confirm": lambda s: ['data-count="1"'],
    "/dead-letters/{dead_letter_id:int}": lambda s: ["boom"],
    "/fragments/dead-letters/{dead_letter_id:int}": lambda s: ["boom"],
    "/schedules": lambda s: ["nightly"],
    "/fragments/schedules": lambda s: ["nightly"],
    "/schedules/{name}": lambda s: ["nightly", s.q(1)],
    "/fragments/schedules/{name}": lambda s: ["nightly"],
    "/workers": lambda s: [f"/workers/{s.worker}"],
    "/fragments/workers": lambda s: [f"/workers/{s.worker}"],
    "/workers/{worker_id:int}": lambda s: [f"/jobs/{s.held_job}"],
    "/fragments/workers/{worker_id:int}": lambda s: [f"/jobs/{s.held_job}"],
    "/settings": lambda s: [s.tenant.slug],
    "/jobs/bulk/confirm": lambda s: ['data-count="'],
    "/workflows": lambda s: [f"/workflows/{s.workflow}", f"/workflows/{s.batch}"],
    "/fragments/workflows": lambda s: [f"/workflows/{s.workflow}", f"/workflows/{s.batch}"],
    "/workflows/{workflow_id:int}": lambda s: [f"/jobs/{j}" for j in s.nodes.values()],
    "/fragments/workflows/{workflow_id:int}": lambda s: ["<code>mid</code>"],
    "/signin": lambda s: [],
}


def test_every_page_is_in_the_table() -> None:
    pages = {p.path for p in DASHBOARD_PAGES if p.method == "GET"}
    assert pages - set(PAGE_CONTENT) == {"/events"}


@pytest.fixture
def session(app_client: TestClient, world_url: str, world: World) -> Session:
    with psycopg.connect(world_url, autocommit=True) as conn:
        return sign_in(app_client, conn, world.a.users[Role.OWNER])


def test_every_dashboard_page_shows_the_tenants_rows(session: Session, world: World) -> None:
    a, b = world.a, world.b
    for page in DASHBOARD_PAGES:
        if page.method != "GET" or page.path in ("/events",):
            continue
        path = _page_path(page.path, a)
        if page.path == "/jobs/bulk/confirm":
            path += f"?action=cancel&queue={a.q(2)}"
        got = session.get(path, follow_redirects=False)
        if page.path == "/signin":
            assert got.status_code == 303, "signed in already: on to the overview"
            continue
        assert got.status_code == 200, f"{path}: {got.status_code} {got.text[:300]}"
        for expected in PAGE_CONTENT[page.path](a):
            assert expected in got.text, f"{path} does not show {expected!r}"
        assert f"{FOREIGN}-q" not in got.text, f"{path} shows tenant B"
        assert b.tenant.slug not in got.text, f"{path} shows tenant B"


def test_the_dashboards_actions_work_on_the_cluster(session: Session, world: World) -> None:
    a = world.a
    queued = sorted(a.jobs - {a.held_job, a.dead_job})
    steps = [
        (f"/queues/{a.q(2)}/pause", {}),
        (f"/queues/{a.q(2)}/resume", {}),
        (f"/queues/{a.q(2)}/limits", {"max_running": "3"}),
        (f"/jobs/{queued[0]}/cancel", {}),
        ("/jobs/bulk", {"action": "cancel", "ids": str(queued[1])}),
        (f"/jobs/{a.dead_job}/retry", {}),
        ("/schedules/nightly/pause", {}),
        ("/schedules/nightly/resume", {}),
        ("/schedules/nightly/run", {}),
        (f"/workflows/{a.workflow}/nodes/mid/skip", {}),
        (f"/workflows/{a.workflow}/cancel", {}),
        (f"/workflows/{a.workflow}/retry", {"mode": "failed"}),
        (f"/workflows/{a.batch}/seal", {}),
    ]
    for path, form in steps:
        got = session.post(path, form)
        assert got.status_code == 303, f"{path}: {got.status_code} {got.text[:300]}"
        assert "error" not in got.headers["location"], path
    confirm = session.get(f"/jobs/bulk/confirm?action=cancel&queue={a.q(3)}")
    as_of = re.search(r'name="as_of" value="([^"]+)"', confirm.text)
    assert as_of, confirm.text[:500]
    filters = re.search(r'name="filters" value="([^"]*)"', confirm.text)
    assert filters is not None
    done = session.post(
        "/jobs/bulk/confirm",
        {
            "action": "cancel",
            "filters": filters.group(1).replace("&amp;", "&"),
            "as_of": as_of.group(1),
        },
    )
    assert done.status_code == 303 and "affected=" in done.headers["location"]
    assert "affected=0" not in done.headers["location"]


# ---------------------------------------------------------------------------------------
# Rule 5: a newer row with a lower id stays out of a confirmed bulk action
# ---------------------------------------------------------------------------------------


def test_a_job_enqueued_after_the_dry_run_stays_out_though_its_id_is_lower(
    app_client: TestClient, world_url: str, world: World
) -> None:
    a = world.a
    admin = a.users[Role.ADMIN].headers
    scope = {"queue": a.q(7), "status": "queued"}
    seen = {j for j in a.jobs if j >= NODE_RANGE}
    dry = _data(
        app_client.post(
            "/api/v1/jobs/bulk",
            json={"action": "cancel", "filter": scope, "dry_run": True},
            headers=admin,
        )
    )
    with psycopg.connect(world_url, autocommit=True) as conn, conn.transaction():
        late = one(
            conn,
            "SELECT job_id FROM codity.enqueue(%s, 't', p_project_id => %s)",
            [a.q(7), a.tenant.project_id],
        )
    assert late < dry["up_to_id"], "the late job should draw a lower id (the coordinator's)"
    assert max(seen) > late
    run = _data(
        app_client.post(
            "/api/v1/jobs/bulk",
            json={"action": "cancel", "filter": scope, "as_of": dry["as_of"]},
            headers=admin,
        )
    )
    assert run["affected"] == dry["matched"]
    late_job = _data(app_client.get(f"/api/v1/jobs/{late}", headers=admin))
    assert late_job["status"] == "queued", "the job enqueued after the dry run was swept in"


def test_the_demo_seeds_a_cluster_and_seeds_it_again(citus_db_url: str) -> None:
    """``codity demo`` commits step by step: Citus refuses the one transaction it was."""
    from codity.demo import seed_demo

    first = seed_demo(citus_db_url)
    assert seed_demo(citus_db_url) == first, "a second seeding resets and seeds the same"
    assert first["completed"] == 12 and first["dead_letter"] == 5 and first["queued"] >= 50
