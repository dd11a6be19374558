"""Orgs, projects, members and API keys over HTTP: the role ladder, the last owner, keys shown
once and revoked at once, and another org's ids answering exactly like missing ones.

Every test has two orgs (``make_tenant`` twice): the second is the foreign tenant whose ids
the first one's users try.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import httpx2 as httpx
import psycopg

from codity.web.access import Role
from tests.webapp import Tenant, add_user, api_key, bearer, make_tenant, web_client

MISSING = 2**62
BEYOND_BIGINT = 2**64


def same_error(a: httpx.Response, b: httpx.Response) -> bool:
    """Two error answers that differ only in their request ids."""

    def strip(r: httpx.Response) -> tuple[int, dict[str, Any]]:
        error = dict(r.json()["error"])
        error.pop("request_id")
        return r.status_code, error

    return strip(a) == strip(b)


def role_of(conn: psycopg.Connection, tenant: Tenant, user_id: int) -> str | None:
    row = conn.execute(
        "SELECT role::text FROM codity.memberships WHERE org_id = %s AND user_id = %s",
        [tenant.org_id, user_id],
    ).fetchone()
    return None if row is None else str(row[0])


# --- the org ----------------------------------------------------------------------------------


def test_org_is_read_by_viewers_and_renamed_only_by_owners(
    db_url: str, conn: psycopg.Connection
) -> None:
    tenant, other = make_tenant(conn), make_tenant(conn)
    viewer, admin = add_user(conn, tenant, Role.VIEWER), add_user(conn, tenant, Role.ADMIN)
    owner = add_user(conn, tenant, Role.OWNER)
    add_user(conn, other, Role.OWNER)
    with web_client(db_url) as client:
        org = client.get("/api/v1/org", headers=viewer.headers)
        assert org.status_code == 200
        assert org.json()["data"]["id"] == tenant.org_id
        assert org.json()["data"]["slug"] == tenant.slug
        for user in (viewer, admin):
            denied = client.patch("/api/v1/org", json={"name": "X"}, headers=user.headers)
            assert denied.status_code == 403, user.role
        renamed = client.patch("/api/v1/org", json={"name": " Acme "}, headers=owner.headers)
        assert renamed.status_code == 200
        assert renamed.json()["data"] == {**org.json()["data"], "name": "Acme"}
        slug = client.patch("/api/v1/org", json={"slug": "x"}, headers=owner.headers)
        assert slug.status_code == 422
        empty = client.patch("/api/v1/org", json={"name": ""}, headers=owner.headers)
        assert empty.status_code == 422
    names = conn.execute(
        "SELECT id, name FROM codity.orgs WHERE id IN (%s, %s)", [tenant.org_id, other.org_id]
    ).fetchall()
    assert dict(names) == {tenant.org_id: "Acme", other.org_id: other.slug}


# --- projects ---------------------------------------------------------------------------------


def test_projects_are_listed_and_created_within_the_callers_org_only(
    db_url: str, conn: psycopg.Connection
) -> None:
    tenant, other = make_tenant(conn), make_tenant(conn)
    viewer, admin = add_user(conn, tenant, Role.VIEWER), add_user(conn, tenant, Role.ADMIN)
    member = add_user(conn, tenant, Role.MEMBER)
    with web_client(db_url) as client:
        body = {"slug": "billing", "name": "Billing"}
        for user in (viewer, member):
            denied = client.post("/api/v1/projects", json=body, headers=user.headers)
            assert denied.status_code == 403, user.role
        created = client.post("/api/v1/projects", json=body, headers=admin.headers)
        assert created.status_code == 201, created.text
        project = created.json()["data"]
        assert project["slug"] == "billing" and project["is_default"] is False
        again = client.post("/api/v1/projects", json=body, headers=admin.headers)
        assert again.status_code == 409
        assert again.json()["error"]["code"] == "conflict"
        for bad in ("Billing", "-x", "a" * 64, "a_b", ""):
            invalid = client.post(
                "/api/v1/projects", json={"slug": bad, "name": "x"}, headers=admin.headers
            )
            assert invalid.status_code == 422, bad
        smuggled = client.post(
            "/api/v1/projects",
            json={"slug": "evil", "name": "x", "org_id": other.org_id},
            headers=admin.headers,
        )
        assert smuggled.status_code == 422
        listed = client.get("/api/v1/projects", headers=viewer.headers).json()["data"]
        assert sorted(p["slug"] for p in listed) == ["billing", "main"]
        renamed = client.patch(
            f"/api/v1/projects/{project['id']}", json={"name": "Billing EU"}, headers=admin.headers
        )
        assert renamed.status_code == 200
        assert renamed.json()["data"]["name"] == "Billing EU"
        assert renamed.json()["data"]["slug"] == "billing"
        assert (
            client.patch(
                f"/api/v1/projects/{project['id']}",
                json={"slug": "other"},
                headers=admin.headers,
            ).status_code
            == 422
        )
    row = conn.execute(
        "SELECT org_id FROM codity.projects WHERE id = %s", [project["id"]]
    ).fetchone()
    assert row == (tenant.org_id,)
    assert conn.execute(
        "SELECT count(*) FROM codity.projects WHERE org_id = %s", [other.org_id]
    ).fetchone() == (1,)


def test_another_orgs_project_answers_exactly_like_a_missing_one(
    db_url: str, conn: psycopg.Connection
) -> None:
    tenant, other = make_tenant(conn), make_tenant(conn)
    owner = add_user(conn, tenant, Role.OWNER)
    foreign = other.project_id
    with web_client(db_url) as client:
        for method, body in (("GET", None), ("PATCH", {"name": "mine now"}), ("DELETE", None)):
            answers = [
                client.request(method, f"/api/v1/projects/{pid}", json=body, headers=owner.headers)
                for pid in (foreign, MISSING, BEYOND_BIGINT)
            ]
            assert all(a.status_code == 404 for a in answers), method
            assert same_error(answers[0], answers[1]), method
            assert same_error(answers[0], answers[2]), method
    row = conn.execute("SELECT name FROM codity.projects WHERE id = %s", [foreign]).fetchone()
    assert row == ("Main",)


def test_project_delete_refuses_the_acting_and_the_default_project(
    db_url: str, conn: psycopg.Connection
) -> None:
    default_org, default_project = conn.execute(
        "SELECT org_id, id FROM codity.projects WHERE is_default"
    ).fetchone() or (0, 0)
    side = conn.execute(
        "INSERT INTO codity.projects (org_id, slug, name) VALUES (%s, 'side', 'Side') RETURNING id",
        [default_org],
    ).fetchone()
    assert side is not None
    # An owner of the default org, acting in its second project.
    tenant = Tenant(org_id=default_org, project_id=side[0], slug="default")
    owner = add_user(conn, tenant, Role.OWNER)
    admin = add_user(conn, tenant, Role.ADMIN)
    doomed = conn.execute(
        "INSERT INTO codity.projects (org_id, slug, name) VALUES (%s, 'doomed', 'Doomed')"
        " RETURNING id",
        [default_org],
    ).fetchone()
    assert doomed is not None
    conn.execute("SELECT codity.create_queue('q', %s)", [doomed[0]])
    doomed_key = api_key(conn, Tenant(default_org, doomed[0], "default"), Role.VIEWER)
    conn.execute("SELECT codity.enqueue('q', 't', p_project_id => %s)", [doomed[0]])
    worker = conn.execute(
        "SELECT codity.register_worker('w', ARRAY['q'], 1, 'h', 1, %s)", [doomed[0]]
    ).fetchone()
    assert worker is not None
    # One finished attempt: an execution row, which no foreign key ties to the project
    # (migration 0019), so the deletion must take it explicitly.
    claimed = conn.execute(
        "SELECT job_id, fence FROM codity.claim(%s, 'q', 1, p_start => true)", [worker[0]]
    ).fetchone()
    assert claimed is not None
    conn.execute("SELECT * FROM codity.complete(%s, %s)", list(claimed))
    conn.execute(
        "SELECT codity.create_schedule('s', 'q', '0 2 * * *', 't', '{}', 'UTC', 0, %s)",
        [doomed[0]],
    )
    with web_client(db_url) as client:
        acting = client.delete(f"/api/v1/projects/{side[0]}", headers=owner.headers)
        assert acting.status_code == 409
        default = client.delete(f"/api/v1/projects/{default_project}", headers=owner.headers)
        assert default.status_code == 409
        by_admin = client.delete(f"/api/v1/projects/{doomed[0]}", headers=admin.headers)
        assert by_admin.status_code == 403
        gone = client.delete(f"/api/v1/projects/{doomed[0]}", headers=owner.headers)
        assert gone.status_code == 204, gone.text
        after = client.get(f"/api/v1/projects/{doomed[0]}", headers=owner.headers)
        assert after.status_code == 404
        assert client.get("/api/v1/queues", headers=bearer(doomed_key)).status_code == 401
    for table in ("queues", "jobs", "job_executions", "workers", "scheduled_jobs", "api_keys"):
        count = conn.execute(
            f"SELECT count(*) FROM codity.{table} WHERE project_id = %s", [doomed[0]]
        ).fetchone()
        assert count == (0,), table
    assert conn.execute("SELECT count(*) FROM codity.jobs").fetchone() == (0,)
    assert conn.execute(
        "SELECT count(*) FROM codity.projects WHERE id IN (%s, %s)", [side[0], default_project]
    ).fetchone() == (2,)


# --- members ----------------------------------------------------------------------------------


def test_members_lists_only_the_callers_org(db_url: str, conn: psycopg.Connection) -> None:
    tenant, other = make_tenant(conn), make_tenant(conn)
    viewer, owner = add_user(conn, tenant, Role.VIEWER), add_user(conn, tenant, Role.OWNER)
    outsider = add_user(conn, other, Role.OWNER)
    with web_client(db_url) as client:
        listed = client.get("/api/v1/members", headers=viewer.headers)
    assert listed.status_code == 200
    members = {m["email"]: m["role"] for m in listed.json()["data"]}
    assert members == {viewer.email: "viewer", owner.email: "owner"}
    assert outsider.email not in members


def test_role_ladder_no_one_grants_or_touches_above_their_own_role(
    db_url: str, conn: psycopg.Connection
) -> None:
    tenant = make_tenant(conn)
    owner, admin = add_user(conn, tenant, Role.OWNER), add_user(conn, tenant, Role.ADMIN)
    viewer = add_user(conn, tenant, Role.VIEWER)
    newcomer = add_user(conn, make_tenant(conn), Role.VIEWER)
    with web_client(db_url) as client:

        def add(user: Any, email: str, role: str) -> httpx.Response:
            return client.post(
                "/api/v1/members", json={"email": email, "role": role}, headers=user.headers
            )

        assert add(viewer, newcomer.email, "viewer").status_code == 403
        assert add(admin, newcomer.email, "owner").status_code == 403
        unknown = add(admin, "nobody@example.test", "member")
        assert unknown.status_code == 404
        assert add(admin, "not-an-email", "member").status_code == 422
        added = add(admin, newcomer.email.upper(), "member")
        assert added.status_code == 201, added.text
        assert added.json()["data"]["role"] == "member"
        assert added.json()["data"]["user_id"] == newcomer.user_id
        assert add(admin, newcomer.email, "viewer").status_code == 409

        def patch(user: Any, target: int, role: str) -> httpx.Response:
            return client.patch(
                f"/api/v1/members/{target}", json={"role": role}, headers=user.headers
            )

        assert patch(viewer, newcomer.user_id, "viewer").status_code == 403
        assert patch(admin, newcomer.user_id, "owner").status_code == 403
        assert patch(admin, admin.user_id, "owner").status_code == 403
        assert patch(admin, owner.user_id, "admin").status_code == 403
        assert (
            client.delete(f"/api/v1/members/{owner.user_id}", headers=admin.headers).status_code
            == 403
        )
        promoted = patch(admin, newcomer.user_id, "admin")
        assert promoted.status_code == 200
        assert promoted.json()["data"]["role"] == "admin"
        assert patch(owner, newcomer.user_id, "owner").status_code == 200
        # A viewer may leave, but not remove anyone else.
        assert (
            client.delete(f"/api/v1/members/{admin.user_id}", headers=viewer.headers).status_code
            == 403
        )
        left = client.post("/api/v1/org/leave", headers=viewer.headers)
        assert left.status_code == 204
        assert client.get("/api/v1/members", headers=viewer.headers).status_code == 403
    assert role_of(conn, tenant, owner.user_id) == "owner"
    assert role_of(conn, tenant, newcomer.user_id) == "owner"
    assert role_of(conn, tenant, viewer.user_id) is None


def test_last_owner_cannot_be_demoted_or_leave_but_can_hand_over(
    db_url: str, conn: psycopg.Connection
) -> None:
    tenant = make_tenant(conn)
    owner, admin = add_user(conn, tenant, Role.OWNER), add_user(conn, tenant, Role.ADMIN)
    with web_client(db_url) as client:
        demoted = client.patch(
            f"/api/v1/members/{owner.user_id}", json={"role": "admin"}, headers=owner.headers
        )
        assert demoted.status_code == 409
        assert demoted.json()["error"]["code"] == "last_owner"
        left = client.post("/api/v1/org/leave", headers=owner.headers)
        assert left.status_code == 409
        # Hand over: promote another member first, then leave.
        promoted = client.patch(
            f"/api/v1/members/{admin.user_id}", json={"role": "owner"}, headers=owner.headers
        )
        assert promoted.status_code == 200
        left = client.delete(f"/api/v1/members/{owner.user_id}", headers=owner.headers)
        assert left.status_code == 204
        assert client.get("/api/v1/org", headers=owner.headers).status_code == 403
        last = client.post("/api/v1/org/leave", headers=admin.headers)
        assert last.status_code == 409
    assert role_of(conn, tenant, admin.user_id) == "owner"
    assert role_of(conn, tenant, owner.user_id) is None


def _wait_until_blocked_or_done(observer: psycopg.Connection, pending: Future[Any]) -> None:
    """Return once a web backend waits on a row lock, or the request already finished (as
    it does when nothing makes it wait: then the test's assertions say what went wrong)."""
    deadline = time.monotonic() + 10.0
    while not pending.done():
        row = observer.execute(
            """
            SELECT count(*) FROM pg_catalog.pg_stat_activity a
            WHERE a.application_name = 'codity-web' AND a.wait_event_type = 'Lock'
              AND EXISTS (SELECT 1 FROM pg_catalog.pg_locks l
                          WHERE l.pid = a.pid AND NOT l.granted)
            """
        ).fetchone()
        if row is not None and row[0] > 0:
            return
        if time.monotonic() > deadline:
            raise AssertionError("the request neither waited on a lock nor finished")
        time.sleep(0.005)


def test_two_owners_leaving_at_once_cannot_leave_the_org_ownerless(
    db_url: str, conn: psycopg.Connection
) -> None:
    """Owner A leaves (its transaction holds A's row) while owner B demotes themself. B's
    request must wait for A's outcome and then see one owner left: 409, never zero owners.
    Without the FOR UPDATE on the owners, B would count two and demote itself."""
    tenant = make_tenant(conn)
    a, b = add_user(conn, tenant, Role.OWNER), add_user(conn, tenant, Role.OWNER)
    with web_client(db_url) as client, psycopg.connect(db_url) as other:
        other.execute(
            "DELETE FROM codity.memberships WHERE org_id = %s AND user_id = %s",
            [tenant.org_id, a.user_id],
        )
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(
                client.patch,
                f"/api/v1/members/{b.user_id}",
                json={"role": "admin"},
                headers=b.headers,
            )
            _wait_until_blocked_or_done(conn, pending)
            other.commit()
            answer = pending.result(timeout=10)
    owners = conn.execute(
        "SELECT count(*) FROM codity.memberships WHERE org_id = %s AND role = 'owner'",
        [tenant.org_id],
    ).fetchone()
    assert owners == (1,), "the org was left without an owner"
    assert answer.status_code == 409, answer.text
    assert role_of(conn, tenant, b.user_id) == "owner"


def test_another_orgs_user_ids_answer_exactly_like_missing_ones(
    db_url: str, conn: psycopg.Connection
) -> None:
    tenant, other = make_tenant(conn), make_tenant(conn)
    admin = add_user(conn, tenant, Role.ADMIN)
    outsider = add_user(conn, other, Role.MEMBER)
    with web_client(db_url) as client:
        for method, body in (("PATCH", {"role": "viewer"}), ("DELETE", None)):
            answers = [
                client.request(method, f"/api/v1/members/{uid}", json=body, headers=admin.headers)
                for uid in (outsider.user_id, MISSING, BEYOND_BIGINT)
            ]
            assert all(a.status_code == 404 for a in answers), method
            assert same_error(answers[0], answers[1]), method
            assert same_error(answers[0], answers[2]), method
    assert role_of(conn, other, outsider.user_id) == "member"


# --- API keys ---------------------------------------------------------------------------------


def test_api_key_is_shown_once_works_and_stops_on_the_next_request_after_revoke(
    db_url: str, conn: psycopg.Connection
) -> None:
    tenant = make_tenant(conn)
    admin = add_user(conn, tenant, Role.ADMIN)
    with web_client(db_url) as client:
        created = client.post(
            "/api/v1/api-keys", json={"name": "worker", "role": "member"}, headers=admin.headers
        )
        assert created.status_code == 201, created.text
        data = created.json()["data"]
        key = data["key"]
        assert key.startswith("cdy_") and len(key) >= 40
        assert data["prefix"] == key[: len(data["prefix"])]
        assert data["role"] == "member" and data["created_by"] == admin.user_id
        assert "key_hash" not in data
        listed = client.get("/api/v1/api-keys", headers=admin.headers)
        assert listed.status_code == 200
        assert key not in listed.text
        [shown] = listed.json()["data"]
        assert set(shown) == {
            "id",
            "name",
            "prefix",
            "role",
            "created_by",
            "created_at",
            "last_used_at",
            "revoked_at",
        }
        assert client.get("/api/v1/queues", headers=bearer(key)).status_code == 200
        revoked = client.delete(f"/api/v1/api-keys/{data['id']}", headers=admin.headers)
        assert revoked.status_code == 204
        refused = client.get("/api/v1/queues", headers=bearer(key))
        assert refused.status_code == 401
        again = client.delete(f"/api/v1/api-keys/{data['id']}", headers=admin.headers)
        assert again.status_code == 204
        [shown] = client.get("/api/v1/api-keys", headers=admin.headers).json()["data"]
        assert shown["revoked_at"] is not None
    row = conn.execute(
        "SELECT key_hash <> convert_to(%s, 'UTF8') FROM codity.api_keys", [key]
    ).fetchone()
    assert row == (True,)


def test_api_keys_cannot_manage_org_members_or_keys(db_url: str, conn: psycopg.Connection) -> None:
    tenant = make_tenant(conn)
    admin = add_user(conn, tenant, Role.ADMIN)
    key = api_key(conn, tenant, Role.ADMIN)
    calls: list[tuple[str, str, dict[str, Any] | None]] = [
        ("GET", "/api/v1/org", None),
        ("GET", "/api/v1/projects", None),
        ("POST", "/api/v1/projects", {"slug": "x", "name": "x"}),
        ("GET", "/api/v1/members", None),
        ("POST", "/api/v1/members", {"email": admin.email, "role": "admin"}),
        ("PATCH", f"/api/v1/members/{admin.user_id}", {"role": "viewer"}),
        ("DELETE", f"/api/v1/members/{admin.user_id}", None),
        ("GET", "/api/v1/api-keys", None),
        ("POST", "/api/v1/api-keys", {"name": "child", "role": "admin"}),
    ]
    with web_client(db_url) as client:
        for method, path, body in calls:
            answer = client.request(method, path, json=body, headers=bearer(key))
            assert answer.status_code == 403, (method, path)
            assert answer.json()["error"]["code"] == "forbidden"
    assert role_of(conn, tenant, admin.user_id) == "admin"
    assert conn.execute("SELECT count(*) FROM codity.api_keys").fetchone() == (1,)


def test_a_keys_role_never_exceeds_its_creators(db_url: str, conn: psycopg.Connection) -> None:
    tenant = make_tenant(conn)
    member, admin = add_user(conn, tenant, Role.MEMBER), add_user(conn, tenant, Role.ADMIN)
    owner = add_user(conn, tenant, Role.OWNER)
    with web_client(db_url) as client:

        def create(user: Any, role: str) -> httpx.Response:
            return client.post(
                "/api/v1/api-keys", json={"name": "k", "role": role}, headers=user.headers
            )

        for role in ("viewer", "member", "admin"):
            assert create(member, role).status_code == 403, role
        assert create(admin, "owner").status_code == 422
        assert create(owner, "owner").status_code == 422
        assert create(admin, "admin").status_code == 201
        assert create(owner, "viewer").status_code == 201
        assert (
            client.post(
                "/api/v1/api-keys",
                json={"name": "k", "role": "viewer", "project_id": 1},
                headers=admin.headers,
            ).status_code
            == 422
        )
    roles = conn.execute("SELECT role::text FROM codity.api_keys ORDER BY id").fetchall()
    assert roles == [("admin",), ("viewer",)]


def test_another_projects_key_ids_answer_exactly_like_missing_ones(
    db_url: str, conn: psycopg.Connection
) -> None:
    tenant, other = make_tenant(conn), make_tenant(conn)
    admin = add_user(conn, tenant, Role.ADMIN)
    foreign_key = api_key(conn, other, Role.MEMBER)
    # A second project in the caller's own org is foreign too: keys belong to one project.
    sibling = conn.execute(
        "INSERT INTO codity.projects (org_id, slug, name) VALUES (%s, 'sib', 'Sib') RETURNING id",
        [tenant.org_id],
    ).fetchone()
    assert sibling is not None
    sibling_key = api_key(conn, Tenant(tenant.org_id, sibling[0], tenant.slug), Role.VIEWER)
    ids: dict[int, int] = dict(
        conn.execute("SELECT project_id, id FROM codity.api_keys").fetchall()
    )
    with web_client(db_url) as client:
        answers = [
            client.delete(f"/api/v1/api-keys/{kid}", headers=admin.headers)
            for kid in (ids[other.project_id], ids[sibling[0]], MISSING, BEYOND_BIGINT)
        ]
        assert all(a.status_code == 404 for a in answers)
        assert all(same_error(answers[0], a) for a in answers[1:])
        assert client.get("/api/v1/api-keys", headers=admin.headers).json()["data"] == []
        for key in (foreign_key, sibling_key):
            assert client.get("/api/v1/queues", headers=bearer(key)).status_code == 200
    assert conn.execute(
        "SELECT count(*) FROM codity.api_keys WHERE revoked_at IS NOT NULL"
    ).fetchone() == (0,)


def test_names_with_nul_control_characters_or_lone_surrogates_are_refused_not_500(
    db_url: str, conn: psycopg.Connection
) -> None:
    tenant = make_tenant(conn)
    owner = add_user(conn, tenant, Role.OWNER)
    calls: list[tuple[str, str, dict[str, Any]]] = []
    for bad in ("a\x00b", "line\nbreak", "\ud800"):
        calls += [
            ("PATCH", "/api/v1/org", {"name": bad}),
            ("POST", "/api/v1/projects", {"slug": "ok", "name": bad}),
            ("PATCH", f"/api/v1/projects/{tenant.project_id}", {"name": bad}),
            ("POST", "/api/v1/api-keys", {"name": bad, "role": "viewer"}),
            ("POST", "/api/v1/members", {"email": f"{bad}@example.test", "role": "viewer"}),
        ]
    with web_client(db_url) as client:
        for method, path, body in calls:
            # json.dumps escapes a lone surrogate as \ud800, as a hostile client would send it.
            answer = client.request(
                method,
                path,
                content=json.dumps(body),
                headers={**owner.headers, "Content-Type": "application/json"},
            )
            assert answer.status_code == 422, (method, path, body, answer.text)


def test_a_removed_member_loses_access_and_their_sessions_in_that_org_only(
    db_url: str, conn: psycopg.Connection
) -> None:
    tenant, other = make_tenant(conn), make_tenant(conn)
    admin, member = add_user(conn, tenant, Role.ADMIN), add_user(conn, tenant, Role.MEMBER)
    conn.execute(
        "INSERT INTO codity.memberships (org_id, user_id, role) VALUES (%s, %s, 'member')",
        [other.org_id, member.user_id],
    )
    for org, project in ((tenant.org_id, tenant.project_id), (other.org_id, other.project_id)):
        conn.execute(
            "INSERT INTO codity.refresh_tokens"
            " (user_id, family_id, token_hash, expires_at, org_id, project_id)"
            " VALUES (%s, gen_random_uuid(), gen_random_uuid()::text::bytea,"
            " now() + interval '7 days', %s, %s)",
            [member.user_id, org, project],
        )
    with web_client(db_url) as client:
        assert client.get("/api/v1/org", headers=member.headers).status_code == 200
        removed = client.delete(f"/api/v1/members/{member.user_id}", headers=admin.headers)
        assert removed.status_code == 204
        assert client.get("/api/v1/org", headers=member.headers).status_code == 403
    revoked: dict[int, bool] = dict(
        conn.execute(
            "SELECT org_id, revoked_at IS NOT NULL FROM codity.refresh_tokens WHERE user_id = %s",
            [member.user_id],
        ).fetchall()
    )
    assert revoked == {tenant.org_id: True, other.org_id: False}
    assert role_of(conn, other, member.user_id) == "member"
