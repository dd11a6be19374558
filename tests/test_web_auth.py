"""Sign-in and sessions over real HTTP against a real database.

What is proven here: the register → login → me round trip; wrong password and unknown
email answer byte for byte alike; a hash made with weaker argon2 parameters is replaced at
login; refresh tokens rotate, are stored only hashed, and reusing a rotated one revokes its
whole family (committed, although the request fails); logout revokes; a project the user
cannot reach answers exactly like a missing one; every forged, expired or mis-addressed
access token is refused with 401 and a Bearer challenge on a signed-in and a project route;
the sign-in rate limits admit exactly their budget of 20 concurrent failures, per account
across IPs and per IP (tests/test_auth_rate_limit.py proves the rest of their behaviour).
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import ipaddress
import json
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from argon2 import PasswordHasher, Type
from httpx2 import Response
from starlette.testclient import TestClient

from codity.web.access import Role
from codity.web.app import create_app
from codity.web.passwords import MEMORY_COST_KIB, PARALLELISM, TIME_COST, hash_password
from codity.web.settings import WebSettings
from codity.web.tokens import issue_access
from tests.conftest import cloned
from tests.webapp import SETTINGS, User, add_user, bearer, make_tenant, web_client

LOOSE = dataclasses.replace(SETTINGS, auth_attempts_per_window=10_000)
"""Most tests sign in more than 5 times from one client: lift the auth limit for them."""

PASSWORD = "correct-horse-battery-staple"
_serial = iter(range(1, 10**6))


def _register(client: TestClient, email: str | None = None, org: str = "Acme") -> dict[str, Any]:
    email = email or f"user{next(_serial)}@example.test"
    answer = client.post(
        "/api/v1/auth/register",
        json={"email": email, "password": PASSWORD, "display_name": "Ada", "org_name": org},
    )
    assert answer.status_code == 201, answer.text
    data: dict[str, Any] = answer.json()["data"]
    data["email"] = email
    return data


def _login(client: TestClient, email: str, password: str = PASSWORD, **extra: Any) -> Response:
    return client.post("/api/v1/auth/login", json={"email": email, "password": password, **extra})


def _refresh(client: TestClient, token: str) -> Response:
    return client.post("/api/v1/auth/refresh", json={"refresh_token": token})


def _error_body(answer: Response) -> dict[str, Any]:
    """The error envelope without its request id (the one part meant to differ)."""
    body: dict[str, Any] = answer.json()
    assert set(body) == {"error"}, body
    error = dict(body["error"])
    assert error.pop("request_id")
    return error


def test_register_login_me_round_trip(db_url: str) -> None:
    with web_client(db_url, LOOSE) as client:
        session = _register(client, "Ada@Example.TEST", org="Analytical Engines!")
        assert session["token_type"] == "Bearer"
        assert session["expires_in"] == 15 * 60
        assert session["refresh_expires_in"] == 7 * 24 * 3600
        me = client.get("/api/v1/auth/me", headers=bearer(session["access_token"]))
        assert me.status_code == 200, me.text
        data = me.json()["data"]
        assert data["user"]["email"] == "ada@example.test"
        assert data["user"]["display_name"] == "Ada"
        assert data["org_id"] == session["org_id"]
        assert data["project_id"] == session["project_id"]
        assert data["memberships"] == [
            {
                "org_id": session["org_id"],
                "slug": "analytical-engines",
                "name": "Analytical Engines!",
                "role": "owner",
            }
        ]
        # The new project is usable at once with the owner's token.
        queues = client.get("/api/v1/queues", headers=bearer(session["access_token"]))
        assert queues.status_code == 200, queues.text
        logged_in = _login(client, "ADA@example.test")
        assert logged_in.status_code == 200, logged_in.text
        again = logged_in.json()["data"]
        assert (again["user_id"], again["org_id"], again["project_id"]) == (
            session["user_id"],
            session["org_id"],
            session["project_id"],
        )
        taken = client.post(
            "/api/v1/auth/register",
            json={"email": "ada@example.TEST", "password": PASSWORD, "org_name": "Other"},
        )
        assert taken.status_code == 409
        assert _error_body(taken)["code"] == "conflict"


def test_org_slugs_stay_unique(db_url: str) -> None:
    with web_client(db_url, LOOSE) as client:
        first = _register(client, org="Same Name")
        second = _register(client, org="Same Name")
        slugs = []
        for session in (first, second):
            me = client.get("/api/v1/auth/me", headers=bearer(session["access_token"])).json()
            slugs.append(me["data"]["memberships"][0]["slug"])
        assert slugs[0] == "same-name"
        assert slugs[1].startswith("same-name-") and slugs[1] != slugs[0]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"password": "short-11chr"}, "password"),
        ({"password": "x" * 257}, "password"),
        ({"email": "not-an-email"}, "email"),
        ({"email": "a b@example.test"}, "email"),
        ({"org_name": "bad\x00name"}, "org_name"),
        ({"role": "owner"}, "role"),
        ({"org_id": 1}, "org_id"),
    ],
)
def test_register_rejects_bad_or_server_owned_fields(
    db_url: str, change: dict[str, Any], field: str
) -> None:
    body = {"email": "eve@example.test", "password": PASSWORD, "org_name": "Eve", **change}
    with web_client(db_url, LOOSE) as client:
        answer = client.post("/api/v1/auth/register", json=body)
        assert answer.status_code == 422, answer.text
        error = _error_body(answer)
        assert error["code"] == "validation_failed"
        assert [d["location"] for d in error["details"]] == [["body", field]]
        assert PASSWORD not in answer.text


def test_wrong_password_and_unknown_email_answer_alike(db_url: str) -> None:
    with web_client(db_url, LOOSE) as client:
        session = _register(client)
        wrong_password = _login(client, session["email"], "not-the-password-at-all")
        unknown_email = _login(client, "nobody@example.test", "not-the-password-at-all")
        assert wrong_password.status_code == unknown_email.status_code == 401
        assert _error_body(wrong_password) == _error_body(unknown_email)
        assert _error_body(wrong_password)["code"] == "invalid_credentials"
        assert set(wrong_password.headers) == set(unknown_email.headers)


def test_login_replaces_a_hash_made_with_weaker_parameters(
    db_url: str, conn: psycopg.Connection
) -> None:
    weak = PasswordHasher(time_cost=1, memory_cost=8192, parallelism=1, type=Type.ID)
    with web_client(db_url, LOOSE) as client:
        session = _register(client)
        conn.execute(
            "UPDATE codity.users SET password_hash = %s WHERE id = %s",
            [weak.hash(PASSWORD), session["user_id"]],
        )
        assert _login(client, session["email"]).status_code == 200
    row = conn.execute(
        "SELECT password_hash FROM codity.users WHERE id = %s", [session["user_id"]]
    ).fetchone()
    assert row is not None
    stored: str = row[0]
    assert stored.startswith(f"$argon2id$v=19$m={MEMORY_COST_KIB},t={TIME_COST},p={PARALLELISM}$")
    current = PasswordHasher(
        time_cost=TIME_COST, memory_cost=MEMORY_COST_KIB, parallelism=PARALLELISM, type=Type.ID
    )
    assert current.verify(stored, PASSWORD)
    assert not current.check_needs_rehash(stored)


def test_refresh_rotates_and_the_old_token_stops_working(
    db_url: str, conn: psycopg.Connection
) -> None:
    with web_client(db_url, LOOSE) as client:
        session = _register(client)
        first = session["refresh_token"]
        stored = conn.execute(
            "SELECT token_hash, org_id, project_id FROM codity.refresh_tokens WHERE user_id = %s",
            [session["user_id"]],
        ).fetchall()
        # Only the hash is kept, with the session's tenant beside it.
        assert stored == [
            (hashlib.sha256(first.encode()).digest(), session["org_id"], session["project_id"])
        ]
        rotated = _refresh(client, first)
        assert rotated.status_code == 200, rotated.text
        second = rotated.json()["data"]
        assert second["refresh_token"] != first
        assert (second["org_id"], second["project_id"]) == (
            session["org_id"],
            session["project_id"],
        )
        assert client.get("/api/v1/queues", headers=bearer(second["access_token"])).is_success
        third = _refresh(client, second["refresh_token"])
        assert third.status_code == 200, third.text
    families = conn.execute(
        "SELECT count(DISTINCT family_id), count(*) FROM codity.refresh_tokens WHERE user_id = %s",
        [session["user_id"]],
    ).fetchone()
    assert families == (1, 3)


def test_reusing_a_rotated_refresh_token_revokes_its_family(
    db_url: str, conn: psycopg.Connection
) -> None:
    with web_client(db_url, LOOSE) as client:
        session = _register(client)
        other_session = _login(client, session["email"]).json()["data"]
        first = session["refresh_token"]
        newest = _refresh(client, first).json()["data"]["refresh_token"]
        reused = _refresh(client, first)
        assert reused.status_code == 401
        assert _error_body(reused)["code"] == "unauthorized"
        # The thief's reuse also ended the legitimate holder's newest token...
        assert _refresh(client, newest).status_code == 401
        # ...but not the user's other sign-in (another family).
        assert _refresh(client, other_session["refresh_token"]).status_code == 200
    live = conn.execute(
        "SELECT count(*) FROM codity.refresh_tokens"
        " WHERE user_id = %s AND revoked_at IS NULL AND rotated_at IS NULL",
        [session["user_id"]],
    ).fetchone()
    assert live == (1,)


def test_garbage_refresh_token_is_refused(db_url: str) -> None:
    with web_client(db_url, LOOSE) as client:
        unknown = _refresh(client, "A" * 43)
        assert unknown.status_code == 401
        malformed = _refresh(client, "not a token!")
        assert malformed.status_code == 422


def test_logout_revokes_the_family_of_its_own_token_only(db_url: str) -> None:
    with web_client(db_url, LOOSE) as client:
        alice = _register(client)
        bob = _register(client)
        # Bob naming Alice's refresh token revokes nothing.
        answer = client.post(
            "/api/v1/auth/logout",
            json={"refresh_token": alice["refresh_token"]},
            headers=bearer(bob["access_token"]),
        )
        assert answer.status_code == 204
        alice_next = _refresh(client, alice["refresh_token"])
        assert alice_next.status_code == 200
        token = alice_next.json()["data"]["refresh_token"]
        answer = client.post(
            "/api/v1/auth/logout",
            json={"refresh_token": token},
            headers=bearer(alice["access_token"]),
        )
        assert answer.status_code == 204
        assert answer.content == b""
        assert _refresh(client, token).status_code == 401


def test_logout_everywhere_revokes_every_session(db_url: str) -> None:
    with web_client(db_url, LOOSE) as client:
        first = _register(client)
        second = _login(client, first["email"]).json()["data"]
        answer = client.post(
            "/api/v1/auth/logout", json={"everywhere": True}, headers=bearer(first["access_token"])
        )
        assert answer.status_code == 204
        assert _refresh(client, first["refresh_token"]).status_code == 401
        assert _refresh(client, second["refresh_token"]).status_code == 401


def test_refresh_is_refused_once_the_membership_is_gone(
    db_url: str, conn: psycopg.Connection
) -> None:
    with web_client(db_url, LOOSE) as client:
        session = _register(client)
        conn.execute("DELETE FROM codity.memberships WHERE user_id = %s", [session["user_id"]])
        assert _refresh(client, session["refresh_token"]).status_code == 401


def test_api_keys_cannot_use_signed_in_routes(db_url: str, conn: psycopg.Connection) -> None:
    from tests.webapp import api_key

    tenant = make_tenant(conn)
    key = api_key(conn, tenant, Role.ADMIN)
    with web_client(db_url, LOOSE) as client:
        assert client.get("/api/v1/auth/me", headers=bearer(key)).status_code == 403


def test_a_project_out_of_reach_answers_like_a_missing_one(
    db_url: str, conn: psycopg.Connection
) -> None:
    with web_client(db_url, LOOSE) as client:
        alice = _register(client, org="Alice Org")
        bob = _register(client, org="Bob Org")
        own = _login(client, alice["email"], project_id=alice["project_id"])
        assert own.status_code == 200
        foreign = _login(client, alice["email"], project_id=bob["project_id"])
        missing = _login(client, alice["email"], project_id=8_999_999_999)
        assert foreign.status_code == missing.status_code == 404
        assert _error_body(foreign) == _error_body(missing)
        headers = bearer(alice["access_token"])
        foreign = client.post(
            "/api/v1/auth/switch", json={"project_id": bob["project_id"]}, headers=headers
        )
        missing = client.post(
            "/api/v1/auth/switch", json={"project_id": 8_999_999_999}, headers=headers
        )
        assert foreign.status_code == missing.status_code == 404
        assert _error_body(foreign) == _error_body(missing)


def test_switch_moves_to_a_project_of_another_membership(
    db_url: str, conn: psycopg.Connection
) -> None:
    with web_client(db_url, LOOSE) as client:
        alice = _register(client, org="Alice Org")
        bob = _register(client, org="Bob Org")
        conn.execute(
            "INSERT INTO codity.memberships (org_id, user_id, role) VALUES (%s, %s, 'viewer')",
            [bob["org_id"], alice["user_id"]],
        )
        switched = client.post(
            "/api/v1/auth/switch",
            json={"project_id": bob["project_id"]},
            headers=bearer(alice["access_token"]),
        )
        assert switched.status_code == 200, switched.text
        session = switched.json()["data"]
        assert (session["org_id"], session["project_id"]) == (bob["org_id"], bob["project_id"])
        headers = bearer(session["access_token"])
        assert client.get("/api/v1/queues", headers=headers).status_code == 200
        # A viewer there: reading works, creating a queue does not.
        created = client.post("/api/v1/queues", json={"name": "x"}, headers=headers)
        assert created.status_code == 403
        # The new refresh token continues the new project; the old one keeps its own.
        moved = _refresh(client, session["refresh_token"]).json()["data"]
        assert moved["project_id"] == bob["project_id"]
        stayed = _refresh(client, alice["refresh_token"]).json()["data"]
        assert stayed["project_id"] == alice["project_id"]


def test_a_user_of_no_project_signs_in_without_a_tenant(
    db_url: str, conn: psycopg.Connection
) -> None:
    conn.execute(
        "INSERT INTO codity.users (email, password_hash) VALUES ('loner@example.test', %s)",
        [hash_password(PASSWORD)],
    )
    with web_client(db_url, LOOSE) as client:
        answer = _login(client, "loner@example.test")
        assert answer.status_code == 200, answer.text
        session = answer.json()["data"]
        assert (session["org_id"], session["project_id"]) == (None, None)
        headers = bearer(session["access_token"])
        me = client.get("/api/v1/auth/me", headers=headers).json()["data"]
        assert me["memberships"] == []
        assert client.get("/api/v1/queues", headers=headers).status_code == 403
        assert _refresh(client, session["refresh_token"]).status_code == 200


# ---------------------------------------------------------------------------------------
# JWT negative vectors: each against a signed-in route and a project-scoped one.
# ---------------------------------------------------------------------------------------


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _segment(value: dict[str, Any]) -> str:
    return _b64(json.dumps(value, separators=(",", ":")).encode())


def _signed(
    claims: dict[str, Any],
    *,
    alg: str = "HS256",
    key: bytes = SETTINGS.jwt_secret,
    digest: Callable[[], Any] = hashlib.sha256,
) -> str:
    head = f"{_segment({'alg': alg, 'typ': 'JWT'})}.{_segment(claims)}"
    signature = hmac.new(key, head.encode(), digest).digest()
    return f"{head}.{_b64(signature)}"


def _claims(user: User, **changes: Any) -> dict[str, Any]:
    now = int(time.time())
    claims: dict[str, Any] = {
        "iss": SETTINGS.jwt_issuer,
        "aud": SETTINGS.jwt_audience,
        "sub": str(user.user_id),
        "org": user.tenant.org_id,
        "prj": user.tenant.project_id,
        "iat": now,
        "nbf": now,
        "exp": now + 900,
        "jti": "test-jti",
    }
    for name, value in changes.items():
        if value is None:
            claims.pop(name)
        else:
            claims[name] = value
    return claims


def _tampered(user: User, other_project: int) -> str:
    """A genuine token whose payload now names another project, signature kept."""
    token, _ = issue_access(
        SETTINGS, user_id=user.user_id, org_id=user.tenant.org_id, project_id=user.tenant.project_id
    )
    head, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["prj"] = other_project
    return f"{head}.{_segment(claims)}.{signature}"


def _vectors(user: User, other_project: int) -> dict[str, str]:
    now = int(time.time())
    return {
        "alg_none": f"{_segment({'alg': 'none', 'typ': 'JWT'})}.{_segment(_claims(user))}.",
        "alg_none_signed": _signed(_claims(user), alg="none"),
        "hs512_same_key": _signed(_claims(user), alg="HS512", digest=hashlib.sha512),
        "rs256_header_hmac_body": _signed(_claims(user), alg="RS256"),
        "wrong_key": _signed(_claims(user), key=b"another-secret-" + b"y" * 32),
        "expired": _signed(_claims(user, iat=now - 2000, nbf=now - 2000, exp=now - 1000)),
        "not_yet_valid": _signed(_claims(user, nbf=now + 600)),
        "issued_in_future": _signed(_claims(user, iat=now + 600, nbf=now - 10)),
        "wrong_audience": _signed(_claims(user, aud="someone-else")),
        "wrong_issuer": _signed(_claims(user, iss="evil")),
        "missing_exp": _signed(_claims(user, exp=None)),
        "missing_sub": _signed(_claims(user, sub=None)),
        "project_as_string": _signed(_claims(user, prj=str(user.tenant.project_id))),
        "tampered_payload": _tampered(user, other_project),
        "garbage": "garbage",
        "three_garbage_parts": "a.b.c",
    }


VECTOR_NAMES = [
    "alg_none",
    "alg_none_signed",
    "hs512_same_key",
    "rs256_header_hmac_body",
    "wrong_key",
    "expired",
    "not_yet_valid",
    "issued_in_future",
    "wrong_audience",
    "wrong_issuer",
    "missing_exp",
    "missing_sub",
    "project_as_string",
    "tampered_payload",
    "garbage",
    "three_garbage_parts",
]


@pytest.fixture(scope="module")
def victim_world(pg_server_url: str, template_url: str) -> Iterator[tuple[str, User, int]]:
    """An owner of one project and another project's id, in a database shared by the token
    tests below: they only read (a refused token writes nothing, nor does a GET)."""
    with cloned(pg_server_url) as url:
        with psycopg.connect(url, autocommit=True) as conn:
            tenant = make_tenant(conn)
            other = make_tenant(conn)
            owner = add_user(conn, tenant, Role.OWNER)
        yield url, owner, other.project_id


@pytest.fixture
def victim(victim_world: tuple[str, User, int]) -> tuple[User, int]:
    return victim_world[1], victim_world[2]


@pytest.fixture
def victim_url(victim_world: tuple[str, User, int]) -> str:
    return victim_world[0]


def test_jwt_vector_list_is_complete(victim: tuple[User, int]) -> None:
    assert sorted(_vectors(*victim)) == sorted(VECTOR_NAMES)


@pytest.mark.parametrize("path", ["/api/v1/auth/me", "/api/v1/queues"])
def test_a_genuine_access_token_is_accepted(
    victim_url: str, victim: tuple[User, int], path: str
) -> None:
    """The control for the vectors below: the same claims, honestly signed, get in."""
    user, _ = victim
    with web_client(victim_url, LOOSE) as client:
        assert client.get(path, headers=bearer(_signed(_claims(user)))).status_code == 200


@pytest.mark.parametrize("vector", VECTOR_NAMES)
@pytest.mark.parametrize("path", ["/api/v1/auth/me", "/api/v1/queues"])
def test_forged_or_invalid_access_tokens_are_refused(
    victim_url: str, victim: tuple[User, int], path: str, vector: str
) -> None:
    token = _vectors(*victim)[vector]
    with web_client(victim_url, LOOSE) as client:
        answer = client.get(path, headers=bearer(token))
    assert answer.status_code == 401, (vector, answer.text)
    assert _error_body(answer) == {
        "code": "unauthorized",
        "message": "invalid or expired access token",
    }
    assert answer.headers["www-authenticate"].startswith("Bearer")


@pytest.mark.parametrize("header", ["", "Bearer", "Bearer ", "Basic dXNlcjpwYXNz", "bearer"])
def test_missing_or_other_scheme_credentials_are_refused(victim_url: str, header: str) -> None:
    with web_client(victim_url, LOOSE) as client:
        answer = client.get("/api/v1/auth/me", headers={"Authorization": header} if header else {})
    assert answer.status_code == 401
    assert answer.headers["www-authenticate"].startswith("Bearer")
    assert _error_body(answer)["code"] == "unauthorized"


# ---------------------------------------------------------------------------------------
# Sign-in rate limits under concurrency: failures per IP (5) and per account across IPs.
# ---------------------------------------------------------------------------------------

PROXIED = dataclasses.replace(SETTINGS, trusted_proxies=(ipaddress.ip_network("127.0.0.0/8"),))
"""Behind a trusted local proxy, X-Forwarded-For names the client: one IP per request."""


@contextmanager
def _proxied_client(db_url: str, settings: WebSettings = PROXIED) -> Iterator[TestClient]:
    app = create_app(db_url, settings)
    with TestClient(app, client=("127.0.0.1", 50000)) as client:
        yield client


def _storm(client: TestClient, attempts: list[tuple[str, str]], password: str) -> list[Response]:
    """``attempts`` (client IP, email) all at once, from as many threads."""

    def attempt(ip_and_email: tuple[str, str]) -> Response:
        ip, email = ip_and_email
        return client.post(
            "/api/v1/auth/login",
            json={"email": email, "password": password},
            headers={"X-Forwarded-For": ip},
        )

    with ThreadPoolExecutor(max_workers=len(attempts)) as pool:
        return list(pool.map(attempt, attempts))


def _assert_exactly_five_admitted(answers: list[Response], admitted_status: int) -> None:
    statuses = sorted(a.status_code for a in answers)
    assert statuses == [admitted_status] * 5 + [429] * 15, statuses
    for answer in answers:
        if answer.status_code == 429:
            retry_after = int(answer.headers["retry-after"])
            assert 1 <= retry_after <= 15 * 60
            assert _error_body(answer)["code"] == "rate_limited"


def test_account_limit_is_exact_under_concurrent_attempts(
    db_url: str, conn: psycopg.Connection
) -> None:
    """One failure from each of 20 IPs: no IP reaches its own budget, the account's (5 here,
    50 by default) admits exactly its size."""
    conn.execute(
        "INSERT INTO codity.users (email, password_hash) VALUES ('target@example.test', %s)",
        [hash_password(PASSWORD)],
    )
    attempts = [(f"10.0.0.{i}", "target@example.test") for i in range(1, 21)]
    settings = dataclasses.replace(PROXIED, auth_account_attempts_per_window=5)
    with _proxied_client(db_url, settings) as client:
        answers = _storm(client, attempts, "wrong-password-guess")
        _assert_exactly_five_admitted(answers, 401)
        # Locked for the window even with the right password, from a fresh IP.
        late = client.post(
            "/api/v1/auth/login",
            json={"email": "TARGET@example.test", "password": PASSWORD},
            headers={"X-Forwarded-For": "10.0.1.1"},
        )
        assert late.status_code == 429


def test_ip_limit_is_exact_across_accounts(db_url: str) -> None:
    attempts = [("10.0.0.9", f"someone{i}@example.test") for i in range(20)]
    with _proxied_client(db_url) as client:
        answers = _storm(client, attempts, "wrong-password-guess")
        _assert_exactly_five_admitted(answers, 401)
        other_ip = client.post(
            "/api/v1/auth/login",
            json={"email": "fresh@example.test", "password": "wrong-password-guess"},
            headers={"X-Forwarded-For": "10.0.0.10"},
        )
        assert other_ip.status_code == 401


def test_default_settings_limit_auth_to_five_per_fifteen_minutes() -> None:
    defaults = WebSettings(jwt_secret=b"z" * 32)
    assert (defaults.auth_attempts_per_window, defaults.auth_window_seconds) == (5, 900)
    assert defaults.auth_account_attempts_per_window == 50


def test_concurrent_uses_of_one_refresh_token_rotate_once(
    db_url: str, conn: psycopg.Connection
) -> None:
    """Ten parties present the same token at once: exactly one rotation wins, the others
    are reuse, so the family (the winner's new token too) ends revoked."""
    with web_client(db_url, LOOSE) as client:
        session = _register(client)
        with ThreadPoolExecutor(max_workers=10) as pool:
            answers = list(
                pool.map(lambda _: _refresh(client, session["refresh_token"]), range(10))
            )
        assert sorted(a.status_code for a in answers) == [200] + [401] * 9
    rows = conn.execute(
        "SELECT count(*) FILTER (WHERE rotated_at IS NOT NULL),"
        " count(*) FILTER (WHERE revoked_at IS NULL)"
        " FROM codity.refresh_tokens WHERE user_id = %s",
        [session["user_id"]],
    ).fetchone()
    assert rows == (1, 0)


def test_demo_operator_signs_in_as_owner_of_the_demo_project(db_url: str) -> None:
    from codity.demo import DEMO_OPERATOR_EMAIL, DEMO_OPERATOR_PASSWORD, seed_demo

    seed_demo(db_url)
    with web_client(db_url, LOOSE) as client:
        answer = _login(client, DEMO_OPERATOR_EMAIL, DEMO_OPERATOR_PASSWORD)
        assert answer.status_code == 200, answer.text
        headers = bearer(answer.json()["data"]["access_token"])
        me = client.get("/api/v1/auth/me", headers=headers).json()["data"]
        assert [m["role"] for m in me["memberships"]] == ["owner"]
        queues = client.get("/api/v1/queues", headers=headers).json()["data"]
        assert queues, "the demo project's queues are visible to the operator"
