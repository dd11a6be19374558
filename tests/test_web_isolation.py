"""The isolation matrix: every route, every role and key, own vs foreign vs missing ids.

Two orgs are built with the same shapes and, where it is most dangerous, the same names
(both have a queue "emails" and a schedule "nightly"); B also has things only B has
("b-only"). For each route in ALL_ROUTES that needs a credential:

- callers whose role (or credential kind) is too low get 403, and nothing changes;
- every allowed caller naming B's resource gets 404 with exactly the body a missing id
  gets (request id aside): a foreign resource is indistinguishable from a missing one;
- the lowest allowed role succeeds on its own resource (so the minimum role is exact);
- no answer to A ever mentions B's names, and B's rows are byte-for-byte unchanged.

Break it first: ``test_dropping_the_guard_from_one_route_is_caught`` mounts the same list
with one route's guard removed and shows this matrix failing for it.

The two orgs are built once into a template database; each route's test gets a clone of it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb
from starlette.testclient import TestClient

from codity.web.access import Role, Scope
from codity.web.app import create_app
from codity.web.endpoint import Endpoint
from codity.web.routes import ALL_ROUTES
from tests.conftest import WorldTemplate, cloned, world_template
from tests.sqlapi import one
from tests.webapp import SETTINGS, Tenant, User, add_user, api_key, bearer, make_tenant

FOREIGN_MARK = "b-only"
MISSING_INT = 8_999_999_999
MISSING_NAME = "no-such-thing"
_PARAM = re.compile(r"\{(\w+)(?::\w+)?\}")


@dataclass
class Side:
    tenant: Tenant
    users: dict[Role, User]
    keys: dict[Role, str]
    queued_job: int
    dead_job: int
    dead_letter: int
    extra_project: int
    spare_user: int
    spare_key: int
    worker: int
    workflow: int
    batch: int


def _build(conn: psycopg.Connection, slug: str, *, foreign_only: bool) -> Side:
    tenant = make_tenant(conn, slug)
    p = tenant.project_id
    users = {role: add_user(conn, tenant, role) for role in Role}
    keys = {role: api_key(conn, tenant, role) for role in (Role.ADMIN, Role.MEMBER, Role.VIEWER)}
    names = ["emails", "empty"] + ([FOREIGN_MARK] if foreign_only else [])
    for name in names:
        conn.execute("SELECT * FROM codity.create_queue(%s, %s, 1)", [name, p])
    queued = one(conn, "SELECT job_id FROM codity.enqueue('emails', 't', p_project_id => %s)", [p])
    worker = one(conn, "SELECT codity.register_worker('w', ARRAY['empty'], 1, 'h', 1, %s)", [p])
    conn.execute("SELECT * FROM codity.enqueue('empty', 'doomed', p_project_id => %s)", [p])
    job, fence = conn.execute(
        "SELECT job_id, fence FROM codity.claim(%s, 'empty', 1)", [worker]
    ).fetchone() or (0, 0)
    conn.execute("SELECT * FROM codity.start(%s, %s)", [job, fence])
    conn.execute("SELECT * FROM codity.fail(%s, %s, 'boom')", [job, fence])
    dead_letter = one(conn, "SELECT id FROM codity.dead_letters WHERE job_id = %s", [job])
    workflow = one(
        conn,
        "SELECT workflow_id FROM codity.enqueue_workflow(%s, %s) LIMIT 1",
        [Jsonb({"name": "wf", "nodes": [{"key": "a", "queue": "emails", "task": "t"}]}), p],
    )
    member = {"queue": "emails", "task": "t"}
    batch = one(
        conn,
        "SELECT batch_id FROM codity.create_batch(%s, %s) LIMIT 1",
        [Jsonb({"open": True, "jobs": [member], "callbacks": {"all_done": member}}), p],
    )
    schedules = ["nightly"] + ([FOREIGN_MARK] if foreign_only else [])
    for name in schedules:
        conn.execute(
            "SELECT * FROM codity.create_schedule(%s, 'emails', '0 2 * * *', 't', '{}', 'UTC',"
            " 0, %s)",
            [name, p],
        )
    extra = one(
        conn,
        "INSERT INTO codity.projects (org_id, slug, name) VALUES (%s, 'extra', 'Extra')"
        " RETURNING id",
        [tenant.org_id],
    )
    spare_user = add_user(conn, tenant, Role.VIEWER).user_id
    spare_key_value = api_key(conn, tenant, Role.VIEWER)
    spare_key = one(
        conn,
        "SELECT id FROM codity.api_keys WHERE prefix = %s AND project_id = %s",
        [spare_key_value[:12], p],
    )
    return Side(
        tenant, users, keys, queued, job, dead_letter, extra, spare_user, spare_key, worker,
        workflow, batch,
    )  # fmt: skip


def _two_sides(conn: psycopg.Connection) -> tuple[Side, Side]:
    # A user of no org, for the add-member route to add.
    conn.execute(
        "INSERT INTO codity.users (email, password_hash) VALUES ('outsider@nowhere.test', 'x')"
    )
    return _build(conn, "org-a", foreign_only=False), _build(conn, "org-b", foreign_only=True)


@pytest.fixture(scope="module")
def built(pg_server_url: str, template_url: str) -> Iterator[WorldTemplate[tuple[Side, Side]]]:
    """The two tenants, built once into a template database for this module."""
    with world_template(pg_server_url, _two_sides) as made:
        yield made


@pytest.fixture
def db_url(pg_server_url: str, built: WorldTemplate[tuple[Side, Side]]) -> Iterator[str]:
    """Here, each test's database is a clone of the two-tenant world (its requests write)."""
    with cloned(pg_server_url, built.name) as url:
        yield url


@pytest.fixture
def world(built: WorldTemplate[tuple[Side, Side]]) -> tuple[Side, Side]:
    return built.world


def _b_digest(conn: psycopg.Connection, b: Side) -> str:
    """Every row of B's, hashed: any write into B changes it."""
    return str(
        one(
            conn,
            """
            SELECT md5(concat_ws('|',
              (SELECT string_agg(q::text, ',' ORDER BY q.id) FROM codity.queues q
                WHERE q.project_id = %(p)s),
              (SELECT string_agg(j::text, ',' ORDER BY j.id) FROM codity.jobs j
                JOIN codity.queues q ON q.id = j.queue_id WHERE q.project_id = %(p)s),
              (SELECT string_agg(d::text, ',' ORDER BY d.id) FROM codity.dead_letters d
                JOIN codity.queues q ON q.id = d.queue_id WHERE q.project_id = %(p)s),
              (SELECT string_agg(s::text, ',' ORDER BY s.id) FROM codity.scheduled_jobs s
                WHERE s.project_id = %(p)s),
              (SELECT string_agg(concat_ws(',', k.id, k.revoked_at, k.role), ';' ORDER BY k.id)
                FROM codity.api_keys k WHERE k.project_id = %(p)s),
              (SELECT string_agg(m::text, ',' ORDER BY m.user_id) FROM codity.memberships m
                WHERE m.org_id = %(o)s),
              (SELECT string_agg(pr::text, ',' ORDER BY pr.id) FROM codity.projects pr
                WHERE pr.org_id = %(o)s),
              (SELECT o::text FROM codity.orgs o WHERE o.id = %(o)s),
              (SELECT string_agg(concat_ws(',', u.id, u.email, u.password_hash), ';' ORDER BY u.id)
                FROM codity.users u JOIN codity.memberships m ON m.user_id = u.id
                WHERE m.org_id = %(o)s)))
            """,
            {"p": b.tenant.project_id, "o": b.tenant.org_id},
        )
    )


def _value(entry: Endpoint, param: str, side: Side) -> Any:
    path = entry.path
    if param == "name":
        if "/schedules/" in path:
            return "nightly"
        return "empty" if entry.method == "DELETE" else "emails"
    if param == "job_id":
        return side.dead_job if path.endswith("/retry") else side.queued_job
    if param == "node_key":
        return "a"
    return {
        "dead_letter_id": side.dead_letter,
        "project_id": side.extra_project,
        "user_id": side.spare_user,
        "key_id": side.spare_key,
        "worker_id": side.worker,
        "workflow_id": side.workflow,
        "batch_id": side.batch,
    }[param]


def _foreign_value(entry: Endpoint, param: str, b: Side) -> Any:
    return FOREIGN_MARK if param == "name" else _value(entry, param, b)


def _missing_value(param: str) -> Any:
    return MISSING_NAME if param == "name" else MISSING_INT


def _path(entry: Endpoint, values: dict[str, Any]) -> str:
    return _PARAM.sub(lambda m: str(values[m.group(1)]), entry.path)


# Bodies naming another tenant's resource by value rather than by path.
def _foreign_body(entry: Endpoint, b: Side) -> dict[str, Any] | None:
    body = dict(entry.example or {})
    if "queue" in body:
        return {**body, "queue": FOREIGN_MARK}
    if "project_id" in body:
        return {**body, "project_id": b.tenant.project_id}
    for many in ("nodes", "jobs"):  # a workflow's nodes, a batch's jobs
        if many in body:
            return {**body, many: [{**item, "queue": FOREIGN_MARK} for item in body[many]]}
    return None


def _own_body(entry: Endpoint, a: Side) -> dict[str, Any] | None:
    if entry.body is None:
        return None
    body = dict(entry.example or {})
    if "project_id" in body:
        body["project_id"] = a.extra_project
    if entry.path == "/api/v1/members" and entry.method == "POST":
        body["email"] = "outsider@nowhere.test"
    return body


def _principals(side: Side) -> list[tuple[str, Role, bool, dict[str, str]]]:
    users = [(f"user:{r.label}", r, False, side.users[r].headers) for r in Role]
    keys = [(f"key:{r.label}", r, True, bearer(k)) for r, k in side.keys.items()]
    return users + keys


def _allowed(entry: Endpoint, role: Role, is_key: bool) -> bool:
    if entry.scope is Scope.AUTHENTICATED:
        return not is_key
    if is_key and not entry.api_keys:
        return False
    assert entry.min_role is not None
    return role >= entry.min_role


def _send(
    client: TestClient, entry: Endpoint, path: str, headers: dict[str, str], body: Any
) -> Any:
    kwargs: dict[str, Any] = {"headers": headers}
    if body is not None:
        kwargs["json"] = body
    return client.request(entry.method, path, **kwargs)


def _without_id(response: Any) -> Any:
    payload = response.json()
    payload.get("error", {}).pop("request_id", None)
    return payload


def matrix_failures(
    client: TestClient, conn: psycopg.Connection, entry: Endpoint, a: Side, b: Side
) -> list[str]:
    failures: list[str] = []
    params = _PARAM.findall(entry.path)
    params = [name for name, *_ in [(p,) if isinstance(p, str) else p for p in params]]
    own_path = _path(entry, {p: _value(entry, p, a) for p in params})
    before = _b_digest(conn, b)

    def check(label: str, response: Any, expected: int | range) -> None:
        ok = (
            response.status_code in expected
            if isinstance(expected, range)
            else (response.status_code == expected)
        )
        if not ok:
            failures.append(
                f"{label}: got {response.status_code}, want {expected}: {response.text[:200]}"
            )
        if FOREIGN_MARK in response.text or b.tenant.slug in response.text:
            failures.append(f"{label}: the answer mentions tenant B")

    principals = _principals(a)
    for label, role, is_key, headers in principals:
        if not _allowed(entry, role, is_key):
            check(f"{label} own", _send(client, entry, own_path, headers, _own_body(entry, a)), 403)

    foreign_body = _foreign_body(entry, b)
    for label, role, is_key, headers in principals:
        if not _allowed(entry, role, is_key):
            continue
        if params:
            foreign = _path(entry, {p: _foreign_value(entry, p, b) for p in params})
            missing = _path(entry, {p: _missing_value(p) for p in params})
            body = _own_body(entry, a)
            got = _send(client, entry, foreign, headers, body)
            check(f"{label} foreign", got, 404)
            absent = _send(client, entry, missing, headers, body)
            if got.status_code == 404 and _without_id(got) != _without_id(absent):
                failures.append(f"{label}: foreign and missing answer differently")
        if foreign_body is not None:
            check(
                f"{label} foreign body", _send(client, entry, own_path, headers, foreign_body), 404
            )

    if _b_digest(conn, b) != before:
        failures.append("tenant B's rows changed")

    allowed = [p for p in principals if _allowed(entry, p[1], p[2])]
    if allowed:
        label, _, _, headers = min(allowed, key=lambda p: (p[2], p[1]))
        response = _send(client, entry, own_path, headers, _own_body(entry, a))
        check(f"{label} own", response, range(200, 300))
    if _b_digest(conn, b) != before:
        failures.append("tenant B's rows changed by A's own request")
    return failures


GUARDED = [e for e in ALL_ROUTES if e.scope is not Scope.PUBLIC]


@pytest.mark.parametrize("entry", GUARDED, ids=lambda e: e.name)
def test_route_answers_each_role_and_hides_the_other_tenant(
    entry: Endpoint, db_url: str, conn: psycopg.Connection, world: tuple[Side, Side]
) -> None:
    a, b = world
    with TestClient(create_app(db_url, SETTINGS)) as client:
        assert matrix_failures(client, conn, entry, a, b) == []


def test_dropping_the_guard_from_one_route_is_caught(
    db_url: str, conn: psycopg.Connection, world: tuple[Side, Side]
) -> None:
    """Break it first: the same route list with one route mounted unguarded fails the matrix."""
    a, b = world
    target = next(e for e in ALL_ROUTES if e.path == "/api/v1/queues/{name}" and e.method == "GET")
    unguarded = dataclasses.replace(target, scope=Scope.AUTHENTICATED)
    entries = [unguarded if e is target else e for e in ALL_ROUTES]
    with TestClient(
        create_app(db_url, SETTINGS, entries=entries), raise_server_exceptions=False
    ) as client:
        assert matrix_failures(client, conn, unguarded, a, b) != []
