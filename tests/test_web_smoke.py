"""First light: the app serves health, docs and a project-scoped route with the envelope."""

from __future__ import annotations

import psycopg

from codity.web.access import Role
from tests.webapp import add_user, make_tenant, web_client


def test_queue_round_trip_with_envelope_and_headers(db_url: str, conn: psycopg.Connection) -> None:
    tenant = make_tenant(conn)
    admin = add_user(conn, tenant, Role.ADMIN)
    with web_client(db_url) as client:
        assert client.get("/healthz").json() == {"data": {"status": "ok"}}
        created = client.post("/api/v1/queues", json={"name": "emails"}, headers=admin.headers)
        assert created.status_code == 201, created.text
        assert created.json()["data"]["name"] == "emails"
        assert created.headers["x-content-type-options"] == "nosniff"
        listed = client.get("/api/v1/queues", headers=admin.headers).json()["data"]
        assert [q["name"] for q in listed] == ["emails"]
        missing = client.get("/api/v1/queues/nope", headers=admin.headers)
        assert missing.status_code == 404
        assert missing.json()["error"]["code"] == "not_found"
        assert client.get("/api/v1/queues").status_code == 401
        assert client.get("/readyz").status_code == 200, client.get("/readyz").text
        assert client.get("/api/v1/openapi.json").json()["openapi"] == "3.1.0"
