"""What one API key can cost the database (issue 29, item 4): its reads have a budget per
minute (429 with Retry-After past it; other keys and signed-in people untouched), and a
project's metrics scrape is read once per few seconds per process however many scrapers
ask, never handed to another project.
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest

from codity.web.access import Role
from codity.web.endpoints import metrics as metrics_endpoint
from tests.webapp import SETTINGS, add_user, api_key, bearer, make_tenant, web_client


def test_a_keys_reads_have_a_budget_and_nobody_else_pays_for_it(
    db_url: str, conn: psycopg.Connection
) -> None:
    tenant = make_tenant(conn)
    busy, other = api_key(conn, tenant, Role.VIEWER), api_key(conn, tenant, Role.MEMBER)
    person = add_user(conn, tenant, Role.VIEWER)
    settings = dataclasses.replace(SETTINGS, key_reads_per_minute=5)
    with web_client(db_url, settings) as client:
        answered = [
            client.get("/api/v1/queues", headers=bearer(busy)).status_code for _ in range(5)
        ]
        refused = client.get("/api/v1/queues", headers=bearer(busy))
        assert answered == [200] * 5
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["code"] == "rate_limited"
        assert 1 <= int(refused.headers["Retry-After"]) <= 60
        assert client.get("/api/v1/queues", headers=bearer(other)).status_code == 200
        for _ in range(8):
            assert client.get("/api/v1/queues", headers=person.headers).status_code == 200


def _scrape(client: Any, key: str) -> tuple[str, int]:
    got = client.get("/api/v1/metrics", headers=bearer(key))
    assert got.status_code == 200, got.text
    return got.text, int(got.headers["Age"])


def test_a_projects_scrape_is_read_once_for_many_scrapers_and_kept_apart(
    db_url: str, conn: psycopg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = make_tenant(conn, "org-a"), make_tenant(conn, "org-b")
    for tenant, name in ((a, "a-only"), (b, "b-only")):
        conn.execute("SELECT * FROM codity.create_queue(%s, %s)", [name, tenant.project_id])
    key_a, key_b = api_key(conn, a, Role.VIEWER), api_key(conn, b, Role.VIEWER)
    reads: list[int] = []
    real = metrics_endpoint._scrape

    async def counted(call: Any) -> bytes:
        reads.append(call.project_id)
        return await real(call)

    monkeypatch.setattr(metrics_endpoint, "_scrape", counted)
    settings = dataclasses.replace(SETTINGS, metrics_cache_seconds=60)
    with web_client(db_url, settings) as client, ThreadPoolExecutor(8) as pool:
        together = list(pool.map(lambda _: _scrape(client, key_a), range(8)))
        assert reads == [a.project_id], "eight scrapes at once, one read"
        conn.execute(
            "SELECT * FROM codity.enqueue('a-only', 't', p_project_id => %s)", [a.project_id]
        )
        later, _ = _scrape(client, key_a)
        theirs, _ = _scrape(client, key_b)
    assert all(text == together[0][0] for text, _ in together)
    assert later == together[0][0], "within the minute: the kept scrape, without the new job"
    assert 'queue="a-only"' in later and 'queue="b-only"' not in later
    assert 'queue="b-only"' in theirs and 'queue="a-only"' not in theirs
    assert reads == [a.project_id, b.project_id]


def test_without_the_cache_every_scrape_reads(db_url: str, conn: psycopg.Connection) -> None:
    tenant = make_tenant(conn)
    conn.execute("SELECT * FROM codity.create_queue('q', %s)", [tenant.project_id])
    key = api_key(conn, tenant, Role.VIEWER)
    settings = dataclasses.replace(SETTINGS, metrics_cache_seconds=0)
    with web_client(db_url, settings) as client:
        before, _ = _scrape(client, key)
        conn.execute(
            "SELECT * FROM codity.enqueue('q', 't', p_project_id => %s)", [tenant.project_id]
        )
        after, age = _scrape(client, key)
    assert 'codity_queue_jobs{queue="q",state="claimable"} 0.0' in before
    assert 'codity_queue_jobs{queue="q",state="claimable"} 1.0' in after and age == 0
