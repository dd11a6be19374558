"""Bad input gets a precise 4xx in the error envelope and changes nothing; a bug gets a
bare 500 with a request id — never a trace, SQL or secret. Logs carry no secret either."""

from __future__ import annotations

import json
import logging
from typing import Any

import psycopg
import pytest
from starlette.testclient import TestClient

from codity.web.access import Role, Scope
from codity.web.app import create_app
from codity.web.call import Call
from codity.web.endpoint import Endpoint
from codity.web.logs import JsonFormatter
from tests.webapp import SETTINGS, User, add_user, make_tenant, web_client


@pytest.fixture
def admin(conn: psycopg.Connection) -> User:
    return add_user(conn, make_tenant(conn), Role.ADMIN)


def _queues(conn: psycopg.Connection) -> list[str]:
    return [r[0] for r in conn.execute("SELECT name FROM codity.queues ORDER BY name")]


def _error(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert error["code"] == code, error
    return error


def test_malformed_bodies_are_refused_and_write_nothing(
    db_url: str, conn: psycopg.Connection, admin: User
) -> None:
    before = _queues(conn)
    h = admin.headers
    with web_client(db_url) as client:
        _error(client.post("/api/v1/queues", headers=h, content=b"{not json",
                           ), 415, "unsupported_media_type")  # fmt: skip
        json_h = {**h, "content-type": "application/json"}
        _error(client.post("/api/v1/queues", headers=json_h, content=b"{not json"),
               400, "invalid_json")  # fmt: skip
        deep = "[" * 40 + "]" * 40
        _error(client.post("/api/v1/queues", headers=json_h, content=deep.encode()),
               400, "json_too_deep")  # fmt: skip
        very_deep = "[" * 100_000 + "]" * 100_000
        too_big = client.post("/api/v1/queues", headers=json_h, content=very_deep.encode())
        assert too_big.status_code in (400, 413)
        _error(client.post("/api/v1/queues", headers=json_h,
                           content=b"{" + b" " * (SETTINGS.max_body_bytes + 1) + b"}"),
               413, "payload_too_large")  # fmt: skip
        unknown = _error(client.post("/api/v1/queues", headers=h,
                                     json={"name": "q1", "colour": "red"}),
                         422, "validation_failed")  # fmt: skip
        assert unknown["details"][0]["location"] == ["body", "colour"]
        for owned in ({"id": 7}, {"project_id": 2}, {"is_paused": True}, {"created_at": "x"}):
            _error(client.post("/api/v1/queues", headers=h, json={"name": "q2", **owned}),
                   422, "validation_failed")  # fmt: skip
        _error(client.post("/api/v1/queues", headers=h, json={"name": "q3", "max_attempts": 0}),
               422, "validation_failed")  # fmt: skip
        _error(client.post("/api/v1/queues", headers=h, json=["q4"]), 422, "validation_failed")
        _error(client.post("/api/v1/queues", headers=h, json={"name": "bad name!"}),
               422, "validation_failed")  # fmt: skip
        _error(client.get("/api/v1/queues?limit=5", headers=h), 400, "unexpected_query")
        _error(client.post("/api/v1/queues/emails/pause", headers=h, json={"x": 1}),
               400, "unexpected_body")  # fmt: skip
        _error(client.delete("/api/v1/queues/emails?force=maybe", headers=h),
               422, "validation_failed")  # fmt: skip
        _error(client.delete("/api/v1/queues/emails?force=1&force=0", headers=h),
               422, "validation_failed")  # fmt: skip
    assert _queues(conn) == before


def test_validation_errors_never_echo_the_value_sent(
    db_url: str, conn: psycopg.Connection, admin: User
) -> None:
    secret = "hunter2-secret-value"
    with web_client(db_url) as client:
        response = client.post(
            "/api/v1/queues", headers=admin.headers, json={"name": "q", "backoff": secret}
        )
    assert response.status_code == 422
    assert secret not in response.text


def test_a_bug_is_a_bare_500_with_the_request_id_and_the_trace_only_in_the_log(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(call: Call[Any, Any]) -> None:
        raise RuntimeError("SELECT password_hash FROM codity.users -- secret detail")

    entries = [Endpoint("GET", "/api/v1/broken", Scope.PUBLIC, broken, "Broken", "test")]
    with (
        caplog.at_level(logging.ERROR, logger="codity.web.access"),
        TestClient(create_app(db_url, SETTINGS, entries=entries)) as client,
    ):
        response = client.get("/api/v1/broken")
    error = _error(response, 500, "internal_error")
    assert "SELECT" not in response.text and "secret" not in response.text
    assert error["request_id"] == response.headers["x-request-id"]
    logged = [r for r in caplog.records if getattr(r, "request_id", None) == error["request_id"]]
    assert logged and logged[0].exc_info is not None


def test_access_log_lines_are_json_and_carry_no_credential_or_payload(
    db_url: str, conn: psycopg.Connection, admin: User, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG), web_client(db_url) as client:
        client.post(
            "/api/v1/queues?token=query-secret",
            headers=admin.headers,
            json={"name": "payload-secret-name"},
        )
    # The server's records (the test client logs its own requests, URL included).
    lines = [JsonFormatter().format(r) for r in caplog.records if r.name.startswith("codity")]
    assert any(json.loads(line).get("path") == "/api/v1/queues" for line in lines)
    text = "\n".join(lines)
    for secret in (admin.token, "query-secret", "payload-secret-name"):
        assert secret not in text


class _Lines(logging.Handler):
    """Formats at emit time, inside the request, as the real handler does."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(JsonFormatter())
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


def test_handler_log_lines_carry_the_request_id_and_no_password_or_token(db_url: str) -> None:
    lines = _Lines()
    codity_logger = logging.getLogger("codity")
    codity_logger.addHandler(lines)
    previous = codity_logger.level
    codity_logger.setLevel(logging.INFO)
    password = "a-very-long-secret-passphrase"
    try:
        with web_client(db_url) as client:
            response = client.post(
                "/api/v1/auth/register",
                json={
                    "email": "logs@example.test",
                    "password": password,
                    "display_name": "Logs",
                    "org_name": "Logs Org",
                },
            )
    finally:
        codity_logger.removeHandler(lines)
        codity_logger.setLevel(previous)
    assert response.status_code == 201, response.text
    request_id = response.headers["x-request-id"]
    registered = [json.loads(x) for x in lines.lines if '"user registered"' in x]
    assert registered and registered[0]["request_id"] == request_id
    text = "\n".join(lines.lines)
    tokens = response.json()["data"]
    for secret in (password, tokens["access_token"], tokens["refresh_token"]):
        assert secret not in text
