"""Building the web app against a test database, and tenants, users and credentials for it.

Tenants and users are inserted directly (as the test database's owner) so that tests of
one route do not depend on the auth routes working; the auth routes have their own tests.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg
from starlette.testclient import TestClient

from codity.web.access import Role
from codity.web.app import create_app
from codity.web.keys import display_prefix, hash_key, new_key
from codity.web.settings import WebSettings
from codity.web.tokens import issue_access
from tests.sqlapi import make_project

__all__ = ["Tenant", "User", "add_user", "api_key", "bearer", "make_tenant", "web_client"]

SETTINGS = WebSettings(jwt_secret=b"test-secret-" + b"x" * 32)
_serial = itertools.count(1)


@contextmanager
def web_client(db_url: str, settings: WebSettings = SETTINGS) -> Iterator[TestClient]:
    with TestClient(create_app(db_url, settings), raise_server_exceptions=True) as client:
        yield client


@dataclass(frozen=True)
class Tenant:
    org_id: int
    project_id: int
    slug: str


@dataclass(frozen=True)
class User:
    user_id: int
    email: str
    role: Role
    tenant: Tenant
    token: str

    @property
    def headers(self) -> dict[str, str]:
        return bearer(self.token)


def bearer(credential: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {credential}"}


def make_tenant(conn: psycopg.Connection, slug: str | None = None) -> Tenant:
    slug = slug or f"org-{next(_serial)}"
    org_id, project_id = make_project(conn, slug)
    return Tenant(org_id=org_id, project_id=project_id, slug=slug)


def add_user(
    conn: psycopg.Connection, tenant: Tenant, role: Role, settings: WebSettings = SETTINGS
) -> User:
    email = f"{role.label}-{next(_serial)}@{tenant.slug}.test"
    row = conn.execute(
        "INSERT INTO codity.users (email, password_hash) VALUES (%s, 'not-a-login') RETURNING id",
        [email],
    ).fetchone()
    assert row is not None
    conn.execute(
        "INSERT INTO codity.memberships (org_id, user_id, role) VALUES (%s, %s, %s)",
        [tenant.org_id, row[0], role.label],
    )
    token, _ = issue_access(
        settings, user_id=row[0], org_id=tenant.org_id, project_id=tenant.project_id
    )
    return User(user_id=row[0], email=email, role=role, tenant=tenant, token=token)


def api_key(conn: psycopg.Connection, tenant: Tenant, role: Role) -> str:
    key = new_key()
    conn.execute(
        "INSERT INTO codity.api_keys (project_id, name, prefix, key_hash, role)"
        " VALUES (%s, %s, %s, %s, %s)",
        [tenant.project_id, f"test-{role.label}", display_prefix(key), hash_key(key), role.label],
    )
    return key
