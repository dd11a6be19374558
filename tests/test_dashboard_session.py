"""The dashboard's session: sign-in through the API's login, a cookie that is the refresh
token, sign-out that revokes it, and every state-changing request checked for this site's
Origin and the session's CSRF token."""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from typing import Any

import psycopg
from starlette.testclient import TestClient

from codity.web.access import Role
from codity.web.app import create_app
from codity.web.dashboard.session import PRE_SESSION_COOKIE, SESSION_COOKIE
from codity.web.passwords import hash_password
from tests.dashboard import ORIGIN, sign_in
from tests.webapp import SETTINGS, add_user, make_tenant, web_client

PASSWORD = "correct-horse-battery-staple"


def _user_with_password(conn: psycopg.Connection[Any], role: Role = Role.OWNER) -> Any:
    tenant = make_tenant(conn)
    user = add_user(conn, tenant, role)
    conn.execute(
        "UPDATE codity.users SET password_hash = %s WHERE id = %s",
        [hash_password(PASSWORD), user.user_id],
    )
    return user


def _signin_token(html: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert found, html
    return found.group(1)


def test_signing_in_sets_a_strict_httponly_cookie_and_shows_the_overview(
    db_url: str, conn: psycopg.Connection[Any]
) -> None:
    user = _user_with_password(conn)
    with web_client(db_url) as client:
        assert client.get("/", follow_redirects=False).headers["location"] == "/signin?next=%2F"
        form = client.get("/signin")
        assert form.status_code == 200 and PRE_SESSION_COOKIE in form.cookies
        answer = client.post(
            "/signin",
            data={"csrf": _signin_token(form.text), "email": user.email, "password": PASSWORD},
            headers={"Origin": ORIGIN},
            follow_redirects=False,
        )
        assert answer.status_code == 303 and answer.headers["location"] == "/"
        cookie = next(c for c in answer.headers.get_list("set-cookie") if SESSION_COOKIE in c)
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
        page = client.get("/")
        assert page.status_code == 200 and "<h1>Overview</h1>" in page.text
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert "'unsafe-inline'" not in page.headers["content-security-policy"]


def test_a_wrong_password_and_a_foreign_next_are_refused(
    db_url: str, conn: psycopg.Connection[Any]
) -> None:
    user = _user_with_password(conn)
    with web_client(db_url) as client:
        form = client.get("/signin?next=//evil.example/")
        token = _signin_token(form.text)
        wrong = client.post(
            "/signin",
            data={"csrf": token, "email": user.email, "password": "nope-nope-nope"},
            headers={"Origin": ORIGIN},
        )
        assert wrong.status_code == 401 and "wrong email or password" in wrong.text
        right = client.post(
            "/signin",
            data={
                "csrf": token,
                "email": user.email,
                "password": PASSWORD,
                "next": "//evil.example/",
            },
            headers={"Origin": ORIGIN},
            follow_redirects=False,
        )
        assert right.headers["location"] == "/"


def test_signing_out_revokes_the_session_family(db_url: str, conn: psycopg.Connection[Any]) -> None:
    user = _user_with_password(conn)
    with web_client(db_url) as client:
        session = sign_in(client, conn, user)
        assert session.get("/").status_code == 200
        out = session.post("/signout")
        assert out.status_code == 303 and out.headers["location"] == "/signin"
        assert session.get("/", follow_redirects=False).status_code == 303
    assert conn.execute(
        "SELECT bool_and(revoked_at IS NOT NULL) FROM codity.refresh_tokens WHERE user_id = %s",
        [user.user_id],
    ).fetchone() == (True,)


def test_a_post_without_csrf_or_from_another_origin_is_refused_and_changes_nothing(
    db_url: str, conn: psycopg.Connection[Any]
) -> None:
    user = _user_with_password(conn)
    with web_client(db_url) as client:
        session = sign_in(client, conn, user)
        no_token = session.forge("/signout", origin=ORIGIN)
        assert no_token.status_code == 403 and "CSRF" in no_token.text
        wrong_token = session.forge("/signout", {"csrf": "0" * 64}, origin=ORIGIN)
        assert wrong_token.status_code == 403
        elsewhere = session.forge("/signout", {"csrf": session.csrf}, origin="https://evil.example")
        assert elsewhere.status_code == 403
        no_origin = session.forge("/signout", {"csrf": session.csrf})
        assert no_origin.status_code == 403
        assert session.get("/").status_code == 200, "the session is still alive"


def test_a_viewer_reads_the_overview_and_sees_no_action_control(
    db_url: str, conn: psycopg.Connection[Any]
) -> None:
    user = _user_with_password(conn, Role.VIEWER)
    with web_client(db_url) as client:
        session = sign_in(client, conn, user)
        page = session.get("/")
        assert page.status_code == 200
        assert "viewer" in page.text


def test_behind_a_trusted_tls_proxy_forms_and_cookies_follow_the_browsers_scheme(
    db_url: str, conn: psycopg.Connection[Any]
) -> None:
    """TLS ends at a proxy: the app sees http, the browser's Origin says https. Only a peer
    in CODITY_TRUSTED_PROXIES may say so (X-Forwarded-Proto); anyone else may not."""
    user = _user_with_password(conn)
    proxied = dataclasses.replace(SETTINGS, trusted_proxies=(ipaddress.ip_network("10.0.0.0/8"),))
    https = {"X-Forwarded-Proto": "https"}
    app = create_app(db_url, proxied)
    with TestClient(app, client=("10.1.2.3", 4000), headers=https) as client:
        form = client.get("/signin")
        pre = next(c for c in form.headers.get_list("set-cookie") if PRE_SESSION_COOKIE in c)
        assert "Secure" in pre
        # The test client speaks http, so it keeps a Secure cookie to itself: sent by hand.
        pre_value = pre.split(";")[0].split("=", 1)[1]
        answer = client.post(
            "/signin",
            data={"csrf": _signin_token(form.text), "email": user.email, "password": PASSWORD},
            headers={"Origin": "https://testserver", "Cookie": f"{PRE_SESSION_COOKIE}={pre_value}"},
            follow_redirects=False,
        )
        assert answer.status_code == 303, answer.text
        cookie = next(c for c in answer.headers.get_list("set-cookie") if SESSION_COOKIE in c)
        assert "Secure" in cookie, "the browser came over HTTPS: the cookie must say Secure"
        session = sign_in(client, conn, user)
        plain = session.forge("/signout", {"csrf": session.csrf}, origin=ORIGIN)
        assert plain.status_code == 403, "http://testserver is not the site the browser sees"
        assert (
            session.forge(
                "/signout", {"csrf": session.csrf}, origin="https://testserver"
            ).status_code
            == 303
        )
    with TestClient(app, client=("192.0.2.9", 4000), headers=https) as client:
        session = sign_in(client, conn, user)
        spoofed = session.forge("/signout", {"csrf": session.csrf}, origin="https://testserver")
        assert spoofed.status_code == 403, "an untrusted peer cannot claim https"


def test_a_fragment_fetched_after_the_session_ended_sends_the_page_to_sign_in(
    db_url: str, conn: psycopg.Connection[Any]
) -> None:
    """A live fragment in flight while the user signs out (or the session expires): the
    page goes to the sign-in page and comes back to itself afterwards, not to the bare
    fragment (the browser test saw /signin?next=/fragments/overview)."""
    with web_client(db_url) as client:
        fragment = client.get(
            "/fragments/overview",
            headers={"HX-Request": "true", "HX-Current-URL": "http://testserver/jobs?queue=a"},
            follow_redirects=False,
        )
        assert fragment.status_code == 204
        assert fragment.headers["HX-Redirect"] == "/signin?next=%2Fjobs%3Fqueue%3Da"
        elsewhere = client.get(
            "/fragments/overview",
            headers={"HX-Request": "true", "HX-Current-URL": "https://evil.example/x"},
            follow_redirects=False,
        )
        assert elsewhere.headers["HX-Redirect"] == "/signin?next=%2F"
        bare = client.get("/fragments/workers", follow_redirects=False)
        assert bare.headers["location"] == "/signin?next=%2F"
        page = client.get("/jobs?state=queued", follow_redirects=False)
        assert page.headers["location"] == "/signin?next=%2Fjobs%3Fstate%3Dqueued"
