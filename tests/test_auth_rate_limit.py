"""The sign-in rate limits count failures, resist targeted lockout, and stay exact.

What is proven here, over real HTTP against a real database: a successful sign-in (login or
refresh) gives back the hit it reserved, so one user may sign in any number of times; five
failures from one IP refuse that IP, without checking another password, but do not lock the
owner out from elsewhere; the account's larger budget across all IPs is reached exactly under
concurrency and then refuses even a new IP; refused attempts never reach argon2 and add
nothing to any bucket; registration stays limited per IP on a budget of its own. Below
that, ``codity.rate_limit_refund`` is checked directly with the clock moved: a refund gives
back one hit of the window it was counted in, never of a later one, never below zero.

The argon2 check is observed through a counting wrapper around the real function (a spy,
not a fake): it is how "the refused attempt did no password work" is measured.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import ipaddress
import threading
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import psycopg
import pytest
from httpx2 import Response
from starlette.testclient import TestClient

import codity.web.endpoints.auth as auth_endpoints
from codity.web.app import create_app
from codity.web.passwords import hash_password
from codity.web.settings import WebSettings
from tests.webapp import SETTINGS

PASSWORD = "correct-horse-battery-staple"
WRONG = "wrong-password-guess"
EMAIL = "owner@example.test"
WINDOW = 15 * 60

PROXIED = dataclasses.replace(SETTINGS, trusted_proxies=(ipaddress.ip_network("127.0.0.0/8"),))
"""Behind a trusted local proxy, X-Forwarded-For names the client: one IP per request."""


@contextmanager
def _client(db_url: str, settings: WebSettings = PROXIED) -> Iterator[TestClient]:
    with TestClient(create_app(db_url, settings), client=("127.0.0.1", 50000)) as client:
        yield client


@pytest.fixture
def owner(conn: psycopg.Connection) -> str:
    conn.execute(
        "INSERT INTO codity.users (email, password_hash) VALUES (%s, %s)",
        [EMAIL, hash_password(PASSWORD)],
    )
    return EMAIL


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts every password the login checks with argon2 (the real check still runs)."""
    counted: list[int] = []
    lock = threading.Lock()
    real: Callable[[str | None, str], Awaitable[bool]] = auth_endpoints.verify_password_async  # type: ignore[attr-defined]

    async def counting(stored: str | None, password: str) -> bool:
        with lock:
            counted.append(1)
        return await real(stored, password)

    monkeypatch.setattr(auth_endpoints, "verify_password_async", counting)
    return counted


def _login(client: TestClient, ip: str, email: str = EMAIL, password: str = PASSWORD) -> Response:
    return client.post(
        "/api/v1/auth/login",
        json={"email": email, "password": password},
        headers={"X-Forwarded-For": ip},
    )


def _storm(client: TestClient, attempts: list[tuple[str, str]]) -> list[Response]:
    """``attempts`` (client IP, password) for the owner's account, all at once."""
    with ThreadPoolExecutor(max_workers=len(attempts)) as pool:
        return list(pool.map(lambda a: _login(client, a[0], password=a[1]), attempts))


def _statuses(answers: list[Response]) -> list[int]:
    return sorted(a.status_code for a in answers)


def _assert_refused(answer: Response) -> None:
    assert answer.status_code == 429, answer.text
    assert 1 <= int(answer.headers["retry-after"]) <= WINDOW
    body = answer.json()
    assert set(body) == {"error"}, body
    assert body["error"]["code"] == "rate_limited"
    assert body["error"]["details"]["retry_after_seconds"] == int(answer.headers["retry-after"])


def _hits(conn: psycopg.Connection, pattern: str) -> int:
    row = conn.execute(
        "SELECT coalesce(sum(hits), 0)::integer FROM codity.rate_limit_buckets"
        " WHERE bucket LIKE %s",
        [pattern],
    ).fetchone()
    assert row is not None
    return int(row[0])


# ---------------------------------------------------------------------------------------
# Successes cost nothing.
# ---------------------------------------------------------------------------------------


def test_six_successful_logins_in_a_row_all_succeed(db_url: str, owner: str) -> None:
    with TestClient(create_app(db_url, SETTINGS)) as client:
        for _ in range(6):
            answer = client.post("/api/v1/auth/login", json={"email": owner, "password": PASSWORD})
            assert answer.status_code == 200, answer.text


def test_twenty_concurrent_correct_logins_all_succeed_and_give_their_hits_back(
    db_url: str, owner: str, conn: psycopg.Connection
) -> None:
    """Four IPs, five logins each, at once: every IP bucket is full while they are checked
    (a reservation cannot know the password is right), so the second round passes only if
    the first gave every hit back."""
    settings = dataclasses.replace(PROXIED, auth_account_attempts_per_window=20)
    attempts = [(f"10.0.4.{i % 4}", PASSWORD) for i in range(20)]
    with _client(db_url, settings) as client:
        for _ in range(2):
            assert _statuses(_storm(client, attempts)) == [200] * 20
    assert _hits(conn, "signin:%") == 0


def test_successful_refreshes_do_not_use_up_the_budget(db_url: str) -> None:
    with TestClient(create_app(db_url, SETTINGS)) as client:
        registered = client.post(
            "/api/v1/auth/register",
            json={"email": "ada@example.test", "password": PASSWORD, "org_name": "Acme"},
        )
        assert registered.status_code == 201, registered.text
        token = registered.json()["data"]["refresh_token"]
        for _ in range(6):
            answer = client.post("/api/v1/auth/refresh", json={"refresh_token": token})
            assert answer.status_code == 200, answer.text
            token = answer.json()["data"]["refresh_token"]


# ---------------------------------------------------------------------------------------
# Failures count per IP (5) and per account across IPs (50).
# ---------------------------------------------------------------------------------------


def test_five_failures_from_one_ip_do_not_lock_the_owner_out_from_another(
    db_url: str, owner: str
) -> None:
    with _client(db_url) as client:
        for _ in range(5):
            assert _login(client, "10.0.0.66", password=WRONG).status_code == 401
        assert _login(client, "10.0.0.7").status_code == 200


def test_five_failures_from_one_ip_refuse_it_anything_more_without_a_password_check(
    db_url: str, owner: str, checks: list[int]
) -> None:
    with _client(db_url) as client:
        for _ in range(5):
            assert _login(client, "10.0.0.66", password=WRONG).status_code == 401
        _assert_refused(_login(client, "10.0.0.66"))
        _assert_refused(_login(client, "10.0.0.66", password=WRONG))
        _assert_refused(_login(client, "10.0.0.66", email="someone-else@example.test"))
        refresh = client.post(
            "/api/v1/auth/refresh",
            json={"refresh_token": "A" * 43},
            headers={"X-Forwarded-For": "10.0.0.66"},
        )
        _assert_refused(refresh)
    assert len(checks) == 5


def test_failed_refreshes_count_against_the_client_ip(db_url: str, owner: str) -> None:
    with _client(db_url) as client:
        for _ in range(5):
            answer = client.post(
                "/api/v1/auth/refresh",
                json={"refresh_token": "A" * 43},
                headers={"X-Forwarded-For": "10.0.0.8"},
            )
            assert answer.status_code == 401, answer.text
        _assert_refused(_login(client, "10.0.0.8"))
        assert _login(client, "10.0.0.9").status_code == 200


def test_ip_budget_admits_exactly_five_of_twenty_concurrent_failures(
    db_url: str, owner: str, checks: list[int], conn: psycopg.Connection
) -> None:
    with _client(db_url) as client:
        answers = _storm(client, [("10.0.0.66", WRONG)] * 20)
        assert _statuses(answers) == [401] * 5 + [429] * 15
        for answer in answers:
            if answer.status_code == 429:
                _assert_refused(answer)
        assert len(checks) == 5
        assert _login(client, "10.0.0.7").status_code == 200
    assert _hits(conn, "signin:ip:%") == 5
    assert _hits(conn, "signin:account:%") == 5


def test_account_budget_across_ips_admits_exactly_fifty_then_refuses_a_new_ip(
    db_url: str, owner: str, checks: list[int], conn: psycopg.Connection
) -> None:
    """Sixty failures at once from twelve IPs, five each: every IP is within its own budget,
    the account's 50 is not; the ten refused add nothing anywhere."""
    attempts = [(f"10.0.1.{i % 12}", WRONG) for i in range(60)]
    with _client(db_url) as client:
        answers = _storm(client, attempts)
        assert _statuses(answers) == [401] * 50 + [429] * 10
        assert len(checks) == 50
        _assert_refused(_login(client, "10.0.2.1"))
        assert len(checks) == 50
        # The new IP itself is not penalised: another account signs in from it.
        assert _login(client, "10.0.2.1", email="nobody@example.test").status_code == 401
    assert _hits(conn, "signin:account:owner@%") == 50
    assert _hits(conn, "signin:ip:10.0.1.%") == 50


def test_default_budgets_are_five_per_ip_and_fifty_per_account_in_fifteen_minutes() -> None:
    defaults = WebSettings(jwt_secret=b"z" * 32)
    assert (
        defaults.auth_attempts_per_window,
        defaults.auth_account_attempts_per_window,
        defaults.auth_window_seconds,
    ) == (5, 50, 900)


# ---------------------------------------------------------------------------------------
# Registration: limited per IP, every attempt counting, apart from sign-in.
# ---------------------------------------------------------------------------------------


def test_registration_stays_limited_per_ip_apart_from_sign_in(db_url: str) -> None:
    with _client(db_url) as client:
        for i in range(5):
            answer = client.post(
                "/api/v1/auth/register",
                json={"email": f"u{i}@example.test", "password": PASSWORD, "org_name": "Acme"},
                headers={"X-Forwarded-For": "10.0.3.1"},
            )
            assert answer.status_code == 201, answer.text
        sixth = client.post(
            "/api/v1/auth/register",
            json={"email": "u5@example.test", "password": PASSWORD, "org_name": "Acme"},
            headers={"X-Forwarded-For": "10.0.3.1"},
        )
        _assert_refused(sixth)
        assert _login(client, "10.0.3.1", email="u0@example.test").status_code == 200


# ---------------------------------------------------------------------------------------
# codity.rate_limit_refund, with the clock moved (the test database's owner may).
# ---------------------------------------------------------------------------------------

T0 = dt.datetime(2030, 1, 1, 0, 1, tzinfo=dt.UTC)
"""One minute into a 15-minute window."""


def _hit(conn: psycopg.Connection, at: dt.datetime, bucket: str = "b") -> bool:
    row = conn.execute(
        "SELECT allowed FROM codity.rate_limit_hit(%s, 2, interval '15 minutes', p_now => %s)",
        [bucket, at],
    ).fetchone()
    assert row is not None
    return bool(row[0])


def _refund(conn: psycopg.Connection, hit_at: dt.datetime, now: dt.datetime) -> tuple[bool, int]:
    row = conn.execute(
        "SELECT refunded, hits FROM codity.rate_limit_refund("
        "'b', interval '15 minutes', %s, p_now => %s)",
        [hit_at, now],
    ).fetchone()
    assert row is not None
    return bool(row[0]), int(row[1])


def test_a_refund_gives_back_one_hit_of_the_window_it_was_counted_in(
    tx: psycopg.Connection,
) -> None:
    assert _hit(tx, T0) and _hit(tx, T0)
    assert not _hit(tx, T0)
    assert _refund(tx, T0, T0 + dt.timedelta(minutes=5)) == (True, 1)
    assert _hit(tx, T0 + dt.timedelta(minutes=6))
    assert not _hit(tx, T0 + dt.timedelta(minutes=6))


def test_a_refund_of_an_ended_window_gives_nothing_back_in_the_next(
    tx: psycopg.Connection,
) -> None:
    later = T0 + dt.timedelta(minutes=15)
    assert _hit(tx, T0)
    assert _refund(tx, T0, later) == (False, 0)
    assert _hit(tx, later) and _hit(tx, later)
    assert _refund(tx, T0, later) == (False, 2)
    assert not _hit(tx, later)


def test_a_refund_never_takes_a_count_below_zero(tx: psycopg.Connection) -> None:
    assert _refund(tx, T0, T0) == (False, 0)
    assert _hit(tx, T0)
    assert _refund(tx, T0, T0) == (True, 0)
    assert _refund(tx, T0, T0) == (False, 0)
    row = tx.execute("SELECT hits FROM codity.rate_limit_buckets WHERE bucket = 'b'").fetchone()
    assert row is not None and row[0] == 0


@pytest.mark.parametrize(
    "args",
    [
        "'', interval '15 minutes', now()",
        "NULL, interval '15 minutes', now()",
        "'b', interval '0', now()",
        "'b', NULL, now()",
        "'b', interval '15 minutes', NULL",
        "'b', interval '15 minutes', now(), 0",
        "'b', interval '15 minutes', now(), NULL",
    ],
)
def test_refund_rejects_bad_arguments_and_writes_nothing(tx: psycopg.Connection, args: str) -> None:
    tx.execute("SELECT codity.rate_limit_hit('b', 2, interval '15 minutes')")
    with pytest.raises(psycopg.Error) as raised, tx.transaction():
        tx.execute(f"SELECT * FROM codity.rate_limit_refund({args})")
    assert raised.value.sqlstate == "CD010"
    row = tx.execute("SELECT hits FROM codity.rate_limit_buckets WHERE bucket = 'b'").fetchone()
    assert row is not None and row[0] == 1
