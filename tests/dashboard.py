"""A signed-in dashboard session for server-side tests (no browser).

``sign_in`` gives a user of ``tests.webapp`` a live session the way the sign-in page would:
a refresh token of a new family in the database, its cookie on the test client, and the
session's CSRF token. ``Session.post`` sends a form the way a page of this site does: with
the ``Origin`` of the test server and the CSRF token; ``forge`` leaves either out on purpose.
The sign-in page itself is tested on its own (tests/test_dashboard_session.py).
"""

from __future__ import annotations

import secrets
import uuid
from dataclasses import dataclass
from typing import Any

import httpx2 as httpx
import psycopg
from starlette.testclient import TestClient

from codity.web.dashboard.session import SESSION_COOKIE, csrf_token
from codity.web.refresh import hash_refresh
from tests.webapp import SETTINGS, User

__all__ = ["ORIGIN", "Session", "sign_in"]

ORIGIN = "http://testserver"


@dataclass
class Session:
    client: TestClient
    user: User
    token: str

    @property
    def csrf(self) -> str:
        return csrf_token(SETTINGS, self.token)

    def _wear(self) -> None:
        """Put this session's cookie on the client (several sessions may share one)."""
        self.client.cookies.set(SESSION_COOKIE, self.token)

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        self._wear()
        return self.client.get(path, **kwargs)

    def post(self, path: str, data: dict[str, Any] | None = None, **kwargs: Any) -> httpx.Response:
        return self.forge(path, {"csrf": self.csrf, **(data or {})}, origin=ORIGIN, **kwargs)

    def forge(
        self,
        path: str,
        data: dict[str, Any] | None = None,
        *,
        origin: str | None = None,
        **kwargs: Any,
    ) -> httpx.Response:
        """A POST exactly as given: no CSRF token unless ``data`` has one, ``origin`` as given."""
        headers = dict(kwargs.pop("headers", {}))
        if origin is not None:
            headers["Origin"] = origin
        self._wear()
        return self.client.post(
            path,
            data=data or {},
            headers=headers,
            follow_redirects=False,
            **kwargs,
        )


def sign_in(client: TestClient, conn: psycopg.Connection[Any], user: User) -> Session:
    token = secrets.token_urlsafe(32)
    conn.execute(
        "INSERT INTO codity.refresh_tokens"
        " (user_id, family_id, token_hash, expires_at, org_id, project_id)"
        " VALUES (%s, %s, %s, now() + interval '1 day', %s, %s)",
        [
            user.user_id,
            uuid.uuid4(),
            hash_refresh(token),
            user.tenant.org_id,
            user.tenant.project_id,
        ],
    )
    return Session(client, user, token)
