"""GET /api/v1/jobs and /api/v1/jobs/counts: every filter key, payload containment, and
counts that stop at codity.count_cap() (10,000) and say so.

Jobs are made with codity.enqueue_many and moved through their states with the SQL API;
times are set back as the database's owner where a filter on time needs an old row.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from codity.web.access import Role
from tests.test_web_jobs import claim_and_start, create_queue, dead_letter, register_worker
from tests.test_web_jobs_bulk import enqueue_many
from tests.webapp import Tenant, add_user, make_tenant, web_client


@pytest.fixture
def tenant(conn: psycopg.Connection) -> Tenant:
    made = make_tenant(conn)
    create_queue(conn, made, "emails", max_attempts=1)
    create_queue(conn, made, "reports")
    return made


def ids(client: Any, user: Any, **query: Any) -> set[int]:
    answer = client.get("/api/v1/jobs", params={**query, "limit": 200}, headers=user.headers)
    assert answer.status_code == 200, answer.text
    return {job["id"] for job in answer.json()["data"]}


def test_each_filter_key_narrows_the_list(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    viewer = add_user(conn, tenant, Role.VIEWER)
    dead, _ = dead_letter(conn, tenant, task="send")
    worker = register_worker(conn, tenant, "w", "reports")
    enqueue_many(conn, tenant, 1, queue="reports", task="build")
    running, _ = claim_and_start(conn, tenant, worker, "reports")
    gold = enqueue_many(conn, tenant, 2, task="send", payload={"customer": {"id": 42, "t": "g"}})
    old = enqueue_many(conn, tenant, 2, task="other", payload={"customer": {"id": 7}})
    conn.execute(
        "UPDATE codity.jobs SET created_at = '2026-01-01T00:00Z' WHERE id = ANY(%s)", [old]
    )
    with web_client(db_url) as client:
        assert ids(client, viewer) == {dead, running, *gold, *old}
        assert ids(client, viewer, queue="reports") == {running}
        assert ids(client, viewer, queue="nowhere") == set()
        assert ids(client, viewer, task="send") == {dead, *gold}
        assert ids(client, viewer, id=dead) == {dead}
        assert ids(client, viewer, worker_id=worker) == {running}
        assert ids(client, viewer, status="claimed,running") == {running}
        assert ids(client, viewer, status="dead_letter,queued") == {dead, *gold, *old}
        assert ids(client, viewer, payload='{"customer": {"id": 42}}') == set(gold)
        assert ids(client, viewer, payload='{"customer": {"id": "42"}}') == set()
        assert ids(client, viewer, payload="{}") == {dead, running, *gold, *old}
        assert ids(client, viewer, created_before="2026-06-01T00:00:00Z") == set(old)
        assert ids(client, viewer, created_after="2026-06-01T00:00:00Z") == {dead, running, *gold}
        assert ids(client, viewer, finished_after="2026-06-01T00:00:00Z") == {dead}
        assert ids(client, viewer, finished_before="2026-06-01T00:00:00Z") == set()
        assert ids(client, viewer, task="send", status="queued") == set(gold)


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ({"payload": "[1]"}, "payload must be a JSON object"),
        ({"payload": "{"}, "payload must be a JSON object"),
        ({"status": "sleeping"}, "Input should be"),
        ({"id": "0"}, "greater than or equal to 1"),
        ({"created_after": "2026-01-01T00:00:00"}, "timezone"),
        ({"colour": "red"}, "Extra inputs"),
    ],
)
def test_a_bad_filter_is_a_clear_422(
    db_url: str, conn: psycopg.Connection, tenant: Tenant, query: dict[str, str], words: str
) -> None:
    viewer = add_user(conn, tenant, Role.VIEWER)
    with web_client(db_url) as client:
        paths = ["/api/v1/jobs"] + ([] if "status" in query else ["/api/v1/jobs/counts"])
        for path in paths:
            answer = client.get(path, params=query, headers=viewer.headers)
            assert answer.status_code == 422, answer.text
            assert words in answer.text


def test_counts_stop_at_the_cap_and_say_so(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    viewer = add_user(conn, tenant, Role.VIEWER)
    cap = conn.execute("SELECT codity.count_cap()").fetchone()
    assert cap == (10_000,)
    batch = Jsonb([{"task": "send", "payload": {"n": n}} for n in range(1000)])
    for _ in range(10):
        conn.execute(
            "SELECT count(*) FROM codity.enqueue_many('emails', %s, %s)",
            [batch, tenant.project_id],
        )
    enqueue_many(conn, tenant, 1, task="last")
    dead, _ = dead_letter(conn, tenant, queue="reports")
    with web_client(db_url) as client:
        counts = client.get("/api/v1/jobs/counts", headers=viewer.headers)
        listed = client.get("/api/v1/jobs", params={"limit": 5}, headers=viewer.headers)
        narrow = client.get("/api/v1/jobs/counts", params={"task": "last"}, headers=viewer.headers)
    assert counts.status_code == 200, counts.text
    by_state = {c["state"]: (c["count"], c["capped"]) for c in counts.json()["data"]}
    assert by_state == {
        "all": (10_000, True),
        "waiting": (0, False),
        "scheduled": (0, False),
        "queued": (10_000, True),
        "running": (0, False),
        "completed": (0, False),
        "dead_letter": (1, False),
        "cancelled": (0, False),
    }
    meta = listed.json()["meta"]
    assert (meta["count"], meta["count_capped"]) == (10_000, True)
    assert len(listed.json()["data"]) == 5 and listed.json()["data"][0]["id"] == dead
    narrowed = {c["state"]: (c["count"], c["capped"]) for c in narrow.json()["data"]}
    assert narrowed["all"] == narrowed["queued"] == (1, False)


@pytest.mark.parametrize(
    ("spread", "expected"),
    [
        ((2_600, 2_600, 2_600, 2_600), (10_000, True)),  # every share full: capped at once
        ((2_400, 2_400, 2_400, 2_400), (9_600, False)),  # no share full: exact at once
        ((6_000, 30, 0, 0), (6_030, False)),  # one share full, the sum short: counted again
        ((12_000, 0, 0, 0), (10_000, True)),  # the same, past the cap
    ],
    ids=["shares-full", "shares-short", "one-full-under-cap", "one-full-over-cap"],
)
def test_every_tab_counted_at_once_agrees_with_each_tab_counted_alone(
    db_url: str, conn: psycopg.Connection, spread: tuple[int, ...], expected: tuple[int, bool]
) -> None:
    """/api/v1/jobs/counts counts every tab in one statement, each queue up to its share of
    the cap (codity.web.endpoints.jobs.count_tabs); the list's own count (``count=true``)
    counts one tab over the queues up to the cap. Over four queues however the jobs spread,
    every tab agrees."""
    tenant = make_tenant(conn)
    for n, jobs in enumerate(spread):
        create_queue(conn, tenant, f"q{n}")
        for first in range(0, jobs, 1_000):
            batch = Jsonb([{"task": "t"}] * min(1_000, jobs - first))
            conn.execute(
                "SELECT count(*) FROM codity.enqueue_many(%s, %s, %s)",
                [f"q{n}", batch, tenant.project_id],
            )
    viewer = add_user(conn, tenant, Role.VIEWER)
    with web_client(db_url) as client:
        counts = client.get("/api/v1/jobs/counts", headers=viewer.headers).json()["data"]
        alone = {}
        for tab in counts:
            query: dict[str, Any] = {"count": "true", "limit": 1}
            if tab["statuses"]:
                query["status"] = ",".join(tab["statuses"])
            meta = client.get("/api/v1/jobs", params=query, headers=viewer.headers).json()["meta"]
            alone[tab["state"]] = (meta["count"], meta["count_capped"])
    together = {tab["state"]: (tab["count"], tab["capped"]) for tab in counts}
    assert together == alone
    assert together["all"] == together["queued"] == expected
    assert together["completed"] == (0, False)


def test_another_projects_jobs_are_neither_listed_nor_counted(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    viewer = add_user(conn, tenant, Role.VIEWER)
    other = make_tenant(conn)
    create_queue(conn, other, "emails")
    foreign = enqueue_many(conn, other, 3)
    with web_client(db_url) as client:
        assert ids(client, viewer) == set()
        assert ids(client, viewer, id=foreign[0]) == set()
        counts = client.get("/api/v1/jobs/counts", headers=viewer.headers).json()["data"]
    assert all(c["count"] == 0 for c in counts)


def test_a_list_without_its_count_leaves_the_count_out(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    """count=false, for a caller that has the count from /jobs/counts (the jobs screen)."""
    viewer = add_user(conn, tenant, Role.VIEWER)
    enqueue_many(conn, tenant, 3)
    with web_client(db_url) as client:
        counted = client.get("/api/v1/jobs", headers=viewer.headers).json()
        bare = client.get("/api/v1/jobs?count=false", headers=viewer.headers).json()
    assert (counted["meta"]["count"], counted["meta"]["count_capped"]) == (3, False)
    assert "count" not in bare["meta"] and len(bare["data"]) == 3
