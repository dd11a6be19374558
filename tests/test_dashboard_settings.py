"""The settings screen without a browser: the org, project and role; members and their roles
changed and removed by admins only, with the API's ladder (an admin cannot touch an owner,
the last owner stays) shown as a message, never a 500; API keys listed, created (the key
shown once, in the creating answer only) and revoked, by admins only.

Viewers and members get no controls, and their forged POSTs (right Origin, right CSRF token)
are refused by the API with nothing changed.
"""

from __future__ import annotations

import re
from typing import Any

import psycopg
import pytest

from codity.web.access import Role
from codity.web.dashboard.session import SESSION_COOKIE
from codity.web.keys import hash_key
from tests.dashboard import Session, sign_in
from tests.sqlapi import one
from tests.webapp import Tenant, User, add_user, api_key, bearer, make_tenant, web_client


@pytest.fixture
def tenant(conn: psycopg.Connection) -> Tenant:
    return make_tenant(conn)


def _role_of(conn: psycopg.Connection, tenant: Tenant, user: User) -> str | None:
    found = conn.execute(
        "SELECT role::text FROM codity.memberships WHERE org_id = %s AND user_id = %s",
        [tenant.org_id, user.user_id],
    ).fetchone()
    return None if found is None else str(found[0])


def _keys(conn: psycopg.Connection, tenant: Tenant) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT id, name, role::text, revoked_at IS NOT NULL FROM codity.api_keys"
        " WHERE project_id = %s ORDER BY id",
        [tenant.project_id],
    ).fetchall()


def _posts(html: str) -> set[str]:
    return set(re.findall(r'<form method="post" action="([^"]+)"', html)) - {"/signout", "/switch"}


def _state(conn: psycopg.Connection, tenant: Tenant) -> str:
    """Every membership and key of the tenant, to prove a refused action changed nothing."""
    return str(
        one(
            conn,
            "SELECT concat_ws('|',"
            " (SELECT string_agg(concat_ws(',', user_id, role), ';' ORDER BY user_id)"
            "  FROM codity.memberships WHERE org_id = %(o)s),"
            " (SELECT string_agg(concat_ws(',', id, name, role, revoked_at), ';' ORDER BY id)"
            "  FROM codity.api_keys WHERE project_id = %(p)s))",
            {"o": tenant.org_id, "p": tenant.project_id},
        )
    )


@pytest.mark.parametrize("role", list(Role), ids=lambda r: r.label)
def test_each_role_sees_the_settings_with_the_controls_its_role_allows(
    db_url: str, conn: psycopg.Connection, tenant: Tenant, role: Role
) -> None:
    user = add_user(conn, tenant, role)
    owner = add_user(conn, tenant, Role.OWNER) if role is not Role.OWNER else user
    member = add_user(conn, tenant, Role.MEMBER)
    api_key(conn, tenant, Role.VIEWER)
    key_id = one(
        conn, "SELECT max(id) FROM codity.api_keys WHERE project_id = %s", [tenant.project_id]
    )
    with web_client(db_url) as client:
        page = sign_in(client, conn, user).get("/settings")
    assert page.status_code == 200, page.text
    html = page.text
    assert "style=" not in html and "<script>" not in html
    assert 'href="/static/settings.css"' in html
    assert tenant.slug in html and "Main" in html
    assert f"<dt>Your role</dt><dd>{role.label}</dd>" in html
    for who in (user, owner, member):
        assert who.email in html
    posts = _posts(html)
    if role >= Role.ADMIN:
        assert f"/settings/members/{member.user_id}/role" in posts
        assert f"/settings/members/{member.user_id}/remove" in posts
        assert "/settings/members" in posts and "/settings/api-keys" in posts
        assert f"/settings/api-keys/{key_id}/revoke" in posts
        assert "test-viewer" in html and "data-confirm=" in html
        owner_controls = f"/settings/members/{owner.user_id}/role" in posts
        assert owner_controls == (role is Role.OWNER)
        if role is Role.ADMIN:
            assert "Only an owner can change an owner." in html
            assert '<option value="owner"' not in html
    else:
        assert posts == set()
        assert "Only admins and owners manage API keys." in html
        assert "test-viewer" not in html


@pytest.mark.parametrize("role", [Role.VIEWER, Role.MEMBER], ids=lambda r: r.label)
def test_forged_posts_of_viewers_and_members_are_refused_and_change_nothing(
    db_url: str, conn: psycopg.Connection, tenant: Tenant, role: Role
) -> None:
    user = add_user(conn, tenant, role)
    target = add_user(conn, tenant, Role.VIEWER)
    api_key(conn, tenant, Role.VIEWER)
    key_id = one(
        conn, "SELECT max(id) FROM codity.api_keys WHERE project_id = %s", [tenant.project_id]
    )
    before = _state(conn, tenant)
    with web_client(db_url) as client:
        session = sign_in(client, conn, user)
        answers = [
            session.post(f"/settings/members/{target.user_id}/role", {"role": "admin"}),
            session.post(f"/settings/members/{target.user_id}/remove"),
            session.post("/settings/members", {"email": user.email, "role": "viewer"}),
            session.post("/settings/api-keys", {"name": "sneaky", "role": "viewer"}),
            session.post(f"/settings/api-keys/{key_id}/revoke"),
        ]
    for answer in answers:
        assert answer.status_code == 403, answer.text
        assert "Internal Server Error" not in answer.text
        assert 'role="alert"' in answer.text
    assert _state(conn, tenant) == before


def test_an_admin_changes_a_role_and_removes_a_member(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    admin = add_user(conn, tenant, Role.ADMIN)
    member = add_user(conn, tenant, Role.MEMBER)
    leaver = add_user(conn, tenant, Role.VIEWER)
    with web_client(db_url) as client:
        session = sign_in(client, conn, admin)
        changed = session.post(f"/settings/members/{member.user_id}/role", {"role": "viewer"})
        removed = session.post(f"/settings/members/{leaver.user_id}/remove")
        after = session.get(changed.headers["location"])
    assert (changed.status_code, changed.headers["location"]) == (303, "/settings?notice=role")
    assert (removed.status_code, removed.headers["location"]) == (303, "/settings?notice=removed")
    assert _role_of(conn, tenant, member) == "viewer"
    assert _role_of(conn, tenant, leaver) is None
    assert "Role changed." in after.text and leaver.email not in after.text


def test_an_admin_adds_an_existing_user(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    admin = add_user(conn, tenant, Role.ADMIN)
    elsewhere = add_user(conn, make_tenant(conn), Role.OWNER)
    with web_client(db_url) as client:
        session = sign_in(client, conn, admin)
        added = session.post("/settings/members", {"email": elsewhere.email, "role": "member"})
        again = session.post("/settings/members", {"email": elsewhere.email, "role": "member"})
        too_high = session.post("/settings/members", {"email": "x@y.test", "role": "owner"})
        unknown = session.post("/settings/members", {"email": "nobody@y.test", "role": "viewer"})
    assert added.status_code == 303 and _role_of(conn, tenant, elsewhere) == "member"
    assert unknown.status_code == 404 and "user not found" in unknown.text.lower()
    assert '<form method="post" action="/settings/members"' in unknown.text, "still the page"
    assert again.status_code == 409 and "already a member" in again.text
    assert too_high.status_code == 403 and "above your own role" in too_high.text


def test_the_role_ladder_is_shown_as_a_message_never_a_500(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    owner = add_user(conn, tenant, Role.OWNER)
    admin = add_user(conn, tenant, Role.ADMIN)
    with web_client(db_url) as client:
        as_admin = sign_in(client, conn, admin)
        touch_owner = as_admin.post(f"/settings/members/{owner.user_id}/role", {"role": "viewer"})
        remove_owner = as_admin.post(f"/settings/members/{owner.user_id}/remove")
        grant_owner = as_admin.post(f"/settings/members/{admin.user_id}/role", {"role": "owner"})
        as_owner = sign_in(client, conn, owner)
        last_owner = as_owner.post(f"/settings/members/{owner.user_id}/role", {"role": "admin"})
        no_role = as_owner.post(f"/settings/members/{admin.user_id}/role", {"role": "emperor"})
    for answer in (touch_owner, remove_owner, grant_owner):
        assert answer.status_code == 403, answer.text
        assert re.search(
            r'<p class="error notice" role="alert">you cannot (change|grant)', answer.text
        )
    assert last_owner.status_code == 409
    assert "last owner cannot leave or be demoted" in last_owner.text
    assert no_role.status_code == 422 and "role" in no_role.text
    assert (_role_of(conn, tenant, owner), _role_of(conn, tenant, admin)) == ("owner", "admin")


def _shown_key(html: str) -> str:
    found = re.search(r'<code id="new-key-value">([^<]+)</code>', html)
    assert found, html
    return found.group(1)


def test_a_created_key_is_shown_once_works_and_can_be_revoked(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    admin = add_user(conn, tenant, Role.ADMIN)
    with web_client(db_url) as client:
        session: Session = sign_in(client, conn, admin)
        created = session.post("/settings/api-keys", {"name": "billing", "role": "member"})
        key = _shown_key(created.text)
        later = session.get("/settings")
        works = client.get("/api/v1/queues", headers=bearer(key))
        ((key_id, name, role, revoked),) = _keys(conn, tenant)
        revoke = session.post(f"/settings/api-keys/{key_id}/revoke")
        after = session.get(revoke.headers["location"])
        refused = client.get("/api/v1/queues", headers=bearer(key))
    assert created.status_code == 201
    assert "will not be shown again" in created.text
    assert 'data-copy="new-key-value"' in created.text
    assert created.headers["cache-control"] == "no-store"
    assert "location" not in created.headers and "set-cookie" not in created.headers
    assert (name, role, revoked) == ("billing", "member", False)
    assert one(conn, "SELECT key_hash FROM codity.api_keys WHERE id = %s", [key_id]) == hash_key(
        key
    )
    assert later.status_code == 200 and key not in later.text and "billing" in later.text
    assert key[:12] in later.text, "the list shows the key's prefix"
    assert works.status_code == 200
    assert revoke.status_code == 303 and "API key revoked." in after.text
    assert '<span class="badge bad">revoked</span>' in after.text and key not in after.text
    assert _keys(conn, tenant)[0][3] is True
    assert refused.status_code == 401


def test_key_creation_refusals_are_messages_and_create_nothing(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    admin = add_user(conn, tenant, Role.ADMIN)
    with web_client(db_url) as client:
        session = sign_in(client, conn, admin)
        nameless = session.post("/settings/api-keys", {"name": "  ", "role": "viewer"})
        owner_key = session.post("/settings/api-keys", {"name": "boss", "role": "owner"})
    assert nameless.status_code == 422 and "name" in nameless.text
    assert owner_key.status_code == 422 and "role" in owner_key.text
    assert 'id="new-key-value"' not in nameless.text + owner_key.text
    assert _keys(conn, tenant) == []


def test_another_orgs_member_and_key_read_exactly_like_missing_ones(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    owner = add_user(conn, tenant, Role.OWNER)
    other = make_tenant(conn)
    stranger = add_user(conn, other, Role.MEMBER)
    api_key(conn, other, Role.VIEWER)
    foreign_key = one(
        conn, "SELECT max(id) FROM codity.api_keys WHERE project_id = %s", [other.project_id]
    )
    before = _state(conn, other)

    def page(answer: Any) -> tuple[int, str]:
        return answer.status_code, re.sub(r"request [0-9a-zA-Z-]+", "request …", answer.text)

    with web_client(db_url) as client:
        session = sign_in(client, conn, owner)
        role_foreign = page(
            session.post(f"/settings/members/{stranger.user_id}/role", {"role": "viewer"})
        )
        role_missing = page(session.post("/settings/members/8999999999/role", {"role": "viewer"}))
        remove_foreign = page(session.post(f"/settings/members/{stranger.user_id}/remove"))
        remove_missing = page(session.post("/settings/members/8999999999/remove"))
        revoke_foreign = page(session.post(f"/settings/api-keys/{foreign_key}/revoke"))
        revoke_missing = page(session.post("/settings/api-keys/8999999999/revoke"))
    assert role_foreign == role_missing and role_foreign[0] == 404
    assert remove_foreign == remove_missing and remove_foreign[0] == 404
    assert revoke_foreign == revoke_missing and revoke_foreign[0] == 404
    assert stranger.email not in role_foreign[1] + remove_foreign[1]
    assert _state(conn, other) == before


def test_a_member_of_several_projects_switches_from_the_frame(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    """The frame's switcher lists the org's projects; switching starts a session in the
    chosen one, and a project of another org is refused like a missing one."""
    viewer = add_user(conn, tenant, Role.VIEWER)
    alone = add_user(conn, make_tenant(conn), Role.VIEWER)
    second = one(
        conn,
        "INSERT INTO codity.projects (org_id, slug, name) VALUES (%s, 'second', 'Second')"
        " RETURNING id",
        [tenant.org_id],
    )
    with web_client(db_url) as client:
        single = sign_in(client, conn, alone).get("/settings").text
        session = sign_in(client, conn, viewer)
        before = session.get("/settings").text
        foreign = session.post("/switch", {"project_id": str(alone.tenant.project_id)})
        switched = session.post("/switch", {"project_id": str(second)})
        moved = Session(client, viewer, switched.cookies[SESSION_COOKIE])
        after = moved.get("/settings").text
    assert 'id="project-switch"' not in single, "one project: no switcher"
    switcher = before.split('<select id="project-switch"', 1)[1].split("</select>", 1)[0]
    assert f'<option value="{second}">Second</option>' in switcher
    assert f'<option value="{tenant.project_id}" selected>' in switcher
    assert '<label for="project-switch">Project</label>' in before
    assert foreign.status_code == 404
    assert switched.status_code == 303 and switched.headers["location"] == "/"
    assert "<dt>Project</dt><dd>Second" in after
    assert f'<option value="{second}" selected>Second</option>' in after


def test_a_member_of_two_orgs_switches_to_the_other_orgs_project(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    """The switcher lists every project the user may reach, grouped by org, another org's
    too; switching there acts in that org. Projects of orgs the user is not in never show."""
    viewer = add_user(conn, tenant, Role.VIEWER)
    other = make_tenant(conn)
    stranger_org = make_tenant(conn)
    conn.execute(
        "INSERT INTO codity.memberships (org_id, user_id, role) VALUES (%s, %s, 'member')",
        [other.org_id, viewer.user_id],
    )
    with web_client(db_url) as client:
        session = sign_in(client, conn, viewer)
        page = session.get("/").text
        switcher = page.split('<select id="project-switch"', 1)[1].split("</select>", 1)[0]
        switched = session.post("/switch", {"project_id": str(other.project_id)})
        moved = Session(client, viewer, switched.cookies[SESSION_COOKIE])
        me = moved.get("/settings").text
    assert switcher.count("<optgroup") == 2
    assert f'<option value="{other.project_id}">' in switcher
    assert f'value="{stranger_org.project_id}"' not in switcher
    assert switched.status_code == 303
    assert f'<option value="{other.project_id}" selected>' in me
