"""Jobs, dead letters, workers and the overview over HTTP, against a real PostgreSQL.

Jobs are driven through their lifecycle with the SQL API as the database owner (register,
claim, start, fail), the way a worker would; the HTTP routes are then what an operator
sees and does. Concurrency is real: two connections interleaved in an explicit order, and
two app instances (two "replicas") answering at once.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx2 as httpx
import psycopg
import pytest
from psycopg.types.json import Jsonb

from codity.web.access import Role
from tests import sqlapi
from tests.webapp import SETTINGS, Tenant, add_user, api_key, bearer, make_tenant, web_client

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


# ---------------------------------------------------------------------------------------
# Helpers: the SQL API as a worker and an operator's psql would use it.
# ---------------------------------------------------------------------------------------


def create_queue(
    conn: psycopg.Connection, tenant: Tenant, name: str = "emails", max_attempts: int = 3
) -> None:
    sqlapi.create_queue(
        conn, name, project_id=tenant.project_id, max_attempts=max_attempts, **sqlapi.NO_BACKOFF
    )


def enqueue(
    conn: psycopg.Connection,
    tenant: Tenant,
    queue: str = "emails",
    task: str = "emails.send",
    *,
    max_attempts: int | None = None,
    now: datetime | None = None,
) -> int:
    row = conn.execute(
        "SELECT job_id FROM codity.enqueue_many(%s, %s, %s, coalesce(%s, now()))",
        [
            queue,
            Jsonb([{"task": task, "payload": {"n": 1}, "max_attempts": max_attempts}]),
            tenant.project_id,
            now,
        ],
    ).fetchone()
    assert row is not None
    return int(row[0])


def register_worker(conn: psycopg.Connection, tenant: Tenant, name: str, queue: str) -> int:
    row = conn.execute(
        "SELECT codity.register_worker(%s, %s, 2, 'host-a', 4242, %s)",
        [name, [queue], tenant.project_id],
    ).fetchone()
    assert row is not None
    return int(row[0])


def claim_and_start(
    conn: psycopg.Connection, tenant: Tenant, worker: int, queue: str = "emails"
) -> tuple[int, int]:
    row = conn.execute(
        "SELECT job_id, fence FROM codity.claim(%s, %s, 1)", [worker, queue]
    ).fetchone()
    assert row is not None, "nothing to claim"
    conn.execute("SELECT * FROM codity.start(%s, %s)", [row[0], row[1]])
    return int(row[0]), int(row[1])


def dead_letter(
    conn: psycopg.Connection, tenant: Tenant, queue: str = "emails", task: str = "emails.send"
) -> tuple[int, int]:
    """A job that failed for good; returns (job id, dead letter id)."""
    job = enqueue(conn, tenant, queue, task, max_attempts=1)
    worker = register_worker(conn, tenant, f"w-{job}", queue)
    claimed, fence = claim_and_start(conn, tenant, worker, queue)
    assert claimed == job
    conn.execute("SELECT * FROM codity.fail(%s, %s, 'boom', false)", [job, fence])
    row = conn.execute(
        "SELECT id FROM codity.dead_letters WHERE job_id = %s AND replayed_at IS NULL", [job]
    ).fetchone()
    assert row is not None
    return job, int(row[0])


def without_request_id(response: httpx.Response) -> dict[str, Any]:
    body: dict[str, Any] = response.json()
    body["error"].pop("request_id")
    return body


@pytest.fixture
def tenant(conn: psycopg.Connection) -> Tenant:
    made = make_tenant(conn)
    create_queue(conn, made)
    return made


# ---------------------------------------------------------------------------------------
# Enqueue
# ---------------------------------------------------------------------------------------


def test_enqueue_returns_the_job_and_an_idempotent_repeat_returns_the_same_job(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    member = add_user(conn, tenant, Role.MEMBER)
    body = {
        "queue": "emails",
        "task": "emails.send",
        "payload": {"to": "a@example.com", "nested": {"list": [1, 2]}},
        "priority": 7,
        "max_attempts": 4,
        "idempotency_key": "welcome-42",
    }
    with web_client(db_url) as client:
        first = client.post("/api/v1/jobs", json=body, headers=member.headers)
        assert first.status_code == 201, first.text
        job = first.json()["data"]
        assert first.json()["meta"] == {"duplicate": False}
        assert job["status"] == "queued"
        assert (job["queue"], job["task"], job["priority"], job["max_attempts"]) == (
            "emails",
            "emails.send",
            7,
            4,
        )
        assert job["payload"] == body["payload"]
        assert job["attempt"] == 0 and job["idempotency_key"] == "welcome-42"

        again = client.post(
            "/api/v1/jobs", json={**body, "payload": {"other": True}}, headers=member.headers
        )
        assert again.status_code == 200, again.text
        assert again.json()["meta"] == {"duplicate": True}
        assert again.json()["data"]["id"] == job["id"]
        assert again.json()["data"]["payload"] == body["payload"]

        key = api_key(conn, tenant, Role.MEMBER)
        by_key = client.post(
            "/api/v1/jobs", json={"queue": "emails", "task": "t"}, headers=bearer(key)
        )
        assert by_key.status_code == 201, by_key.text
    count = conn.execute(
        "SELECT count(*) FROM codity.jobs j JOIN codity.queues q ON q.id = j.queue_id"
        " WHERE q.project_id = %s",
        [tenant.project_id],
    ).fetchone()
    assert count == (2,)


def test_a_delayed_job_starts_scheduled_at_database_time_plus_the_delay(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    member = add_user(conn, tenant, Role.MEMBER)
    with web_client(db_url) as client:
        delayed = client.post(
            "/api/v1/jobs",
            json={"queue": "emails", "task": "t", "delay_ms": 60_000},
            headers=member.headers,
        ).json()["data"]
        at = client.post(
            "/api/v1/jobs",
            json={"queue": "emails", "task": "t", "run_at": "2031-05-01T10:00:00Z"},
            headers=member.headers,
        ).json()["data"]
    assert delayed["status"] == "scheduled"
    run_at = datetime.fromisoformat(delayed["run_at"])
    created = datetime.fromisoformat(delayed["created_at"])
    assert run_at - created == timedelta(seconds=60)
    assert at["status"] == "scheduled"
    assert datetime.fromisoformat(at["run_at"]) == datetime(2031, 5, 1, 10, tzinfo=UTC)


def test_batch_enqueue_reports_each_position_and_collapses_repeated_keys(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    member = add_user(conn, tenant, Role.MEMBER)
    batch = {
        "queue": "emails",
        "jobs": [
            {"task": "a", "payload": {"i": 0}, "idempotency_key": "k1"},
            {"task": "b", "delay_ms": 5000},
            {"task": "a", "payload": {"i": 2}, "idempotency_key": "k1"},
        ],
    }
    with web_client(db_url) as client:
        created = client.post("/api/v1/jobs/batch", json=batch, headers=member.headers)
        assert created.status_code == 201, created.text
        items = created.json()["data"]
        assert [i["index"] for i in items] == [0, 1, 2]
        assert [i["status"] for i in items] == ["queued", "scheduled", "queued"]
        assert [i["is_new"] for i in items] == [True, True, False]
        assert items[2]["id"] == items[0]["id"]
        assert created.json()["meta"] == {"created": 2, "duplicates": 1}

        repeat = client.post(
            "/api/v1/jobs/batch",
            json={"queue": "emails", "jobs": [batch["jobs"][0]]},
            headers=member.headers,
        )
        assert repeat.status_code == 200
        assert repeat.json()["data"][0]["id"] == items[0]["id"]


def test_payload_over_64_kb_is_422_and_a_body_over_the_cap_is_413(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    member = add_user(conn, tenant, Role.MEMBER)
    big = {"blob": "x" * 70_000}
    with web_client(db_url) as client:
        one = client.post(
            "/api/v1/jobs",
            json={"queue": "emails", "task": "t", "payload": big},
            headers=member.headers,
        )
        assert one.status_code == 422, one.text
        assert one.json()["error"]["code"] == "invalid_input"
        assert "x" * 100 not in one.text, "the payload is never echoed"
        batch = client.post(
            "/api/v1/jobs/batch",
            json={"queue": "emails", "jobs": [{"task": "t"}, {"task": "t", "payload": big}]},
            headers=member.headers,
        )
        assert batch.status_code == 422, batch.text
        huge = json.dumps(
            {"queue": "emails", "task": "t", "payload": {"blob": "y" * SETTINGS.max_body_bytes}}
        )
        too_large = client.post(
            "/api/v1/jobs",
            content=huge,
            headers={**member.headers, "Content-Type": "application/json"},
        )
        assert too_large.status_code == 413, too_large.text
        assert too_large.json()["error"]["code"] == "payload_too_large"
    assert conn.execute("SELECT count(*) FROM codity.jobs").fetchone() == (0,)


@pytest.mark.parametrize(
    "body",
    [
        {"queue": "emails", "task": "t", "run_at": "2031-01-01T00:00:00Z", "delay_ms": 5},
        {"queue": "emails", "task": "t", "run_at": "2031-01-01T00:00:00"},
        {"queue": "emails", "task": "t", "status": "completed"},
        {"queue": "emails", "task": "t", "id": 1},
        {"queue": "emails", "task": "t", "attempt": 3},
        {"queue": "emails", "task": "t", "project_id": 1},
        {"queue": "emails", "task": "bad\u0000task"},
        {"queue": "emails", "task": ""},
        {"queue": "emails", "task": "t", "priority": 1001},
        {"queue": "emails", "task": "t", "max_attempts": 0},
        {"queue": "emails", "task": "t", "delay_ms": -1},
        {"queue": "emails", "task": "t", "payload": [1, 2]},
        {"queue": "emails", "task": "t", "idempotency_key": "k" * 201},
        {"queue": "no such/queue", "task": "t"},
        {"queue": "emails", "task": "t", "payload": {"s": "nul\u0000inside"}},
        {"queue": "emails", "task": "\ud800"},
        {"queue": "emails", "task": "t", "payload": {"lone": "\ud800"}},
        {"queue": "emails", "task": "t", "payload": {"x": float("nan")}},
        {"queue": "emails", "task": "t", "run_at": "9999-12-31T23:59:59-14:00"},
    ],
)
def test_bad_enqueue_input_is_a_4xx_and_writes_nothing(
    db_url: str, conn: psycopg.Connection, tenant: Tenant, body: dict[str, Any]
) -> None:
    member = add_user(conn, tenant, Role.MEMBER)
    with web_client(db_url) as client:
        response = client.post(
            "/api/v1/jobs",
            content=json.dumps(body),  # ASCII, NaN allowed: what a careless client may send
            headers={**member.headers, "Content-Type": "application/json"},
        )
    assert response.status_code == 422, response.text
    assert conn.execute("SELECT count(*) FROM codity.jobs").fetchone() == (0,)


def test_batch_size_is_bounded_and_an_unknown_queue_is_404(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    member = add_user(conn, tenant, Role.MEMBER)
    with web_client(db_url) as client:
        empty = client.post(
            "/api/v1/jobs/batch", json={"queue": "emails", "jobs": []}, headers=member.headers
        )
        over = client.post(
            "/api/v1/jobs/batch",
            json={"queue": "emails", "jobs": [{"task": "t"}] * 1001},
            headers=member.headers,
        )
        unknown = client.post(
            "/api/v1/jobs", json={"queue": "nope", "task": "t"}, headers=member.headers
        )
    assert (empty.status_code, over.status_code) == (422, 422)
    assert unknown.status_code == 404
    assert unknown.json()["error"]["code"] == "not_found"


def test_a_viewer_cannot_enqueue_and_a_member_cannot_replay_everything(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    viewer = add_user(conn, tenant, Role.VIEWER)
    member = add_user(conn, tenant, Role.MEMBER)
    viewer_key = api_key(conn, tenant, Role.VIEWER)
    job = enqueue(conn, tenant)
    with web_client(db_url) as client:
        assert (
            client.post(
                "/api/v1/jobs", json={"queue": "emails", "task": "t"}, headers=viewer.headers
            ).status_code
            == 403
        )
        assert (
            client.post(f"/api/v1/jobs/{job}/cancel", headers=bearer(viewer_key)).status_code == 403
        )
        assert (
            client.post("/api/v1/dead-letters/replay", json={}, headers=member.headers).status_code
            == 403
        )
        assert client.get(f"/api/v1/jobs/{job}", headers=bearer(viewer_key)).status_code == 200


# ---------------------------------------------------------------------------------------
# List and get
# ---------------------------------------------------------------------------------------


def test_listing_pages_through_every_job_once_newest_first_with_filters(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    create_queue(conn, tenant, "reports")
    viewer = add_user(conn, tenant, Role.VIEWER)
    ids = [
        enqueue(conn, tenant, "emails" if i % 3 else "reports", now=T0 + timedelta(minutes=i))
        for i in range(23)
    ]
    cancelled = ids[4]
    conn.execute("SELECT * FROM codity.cancel(%s, %s)", [cancelled, tenant.project_id])
    other = make_tenant(conn)
    create_queue(conn, other)
    enqueue(conn, other)

    with web_client(db_url) as client:

        def pages(params: dict[str, Any]) -> list[int]:
            seen: list[int] = []
            cursor = None
            for _ in range(20):
                query = {**params, **({"cursor": cursor} if cursor else {})}
                response = client.get("/api/v1/jobs", params=query, headers=viewer.headers)
                assert response.status_code == 200, response.text
                seen += [j["id"] for j in response.json()["data"]]
                cursor = response.json()["meta"]["next_cursor"]
                if cursor is None:
                    return seen
            raise AssertionError("pagination did not end")

        assert pages({"limit": 7}) == sorted(ids, reverse=True)
        assert pages({"limit": 200}) == sorted(ids, reverse=True)
        assert pages({"limit": 4, "queue": "reports"}) == [
            j for j in sorted(ids, reverse=True) if ids.index(j) % 3 == 0
        ]
        assert pages({"status": "cancelled"}) == [cancelled]
        after, before = T0 + timedelta(minutes=5), T0 + timedelta(minutes=10)
        window = pages(
            {"created_after": after.isoformat(), "created_before": before.isoformat(), "limit": 2}
        )
        assert window == sorted(ids[6:10], reverse=True)

        first = client.get("/api/v1/jobs", params={"limit": 5}, headers=viewer.headers).json()
        assert first["meta"]["limit"] == 5 and first["meta"]["next_cursor"]
        assert "payload" not in first["data"][0]

        for bad in (
            {"cursor": "not-a-cursor!"},
            {"cursor": base64.urlsafe_b64encode(b"-5").decode()},
            {"cursor": base64.urlsafe_b64encode(b"99999999999999999999").decode()},
            {"limit": 0},
            {"limit": 201},
            {"status": "exploded"},
            {"created_after": "yesterday"},
            {"unknown": "1"},
        ):
            response = client.get("/api/v1/jobs", params=bad, headers=viewer.headers)
            assert response.status_code == 422, (bad, response.text)


def test_a_job_shows_every_execution_in_order(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    viewer = add_user(conn, tenant, Role.VIEWER)
    job = enqueue(conn, tenant, max_attempts=3)
    worker = register_worker(conn, tenant, "w1", "emails")
    _, fence = claim_and_start(conn, tenant, worker)
    conn.execute("SELECT * FROM codity.fail(%s, %s, 'first try failed')", [job, fence])
    conn.execute("SELECT codity.promote(now() + interval '1 second')")
    claimed, second = claim_and_start(conn, tenant, worker)
    assert (claimed, second) == (job, 2)

    with web_client(db_url) as client:
        response = client.get(f"/api/v1/jobs/{job}", headers=viewer.headers)
    assert response.status_code == 200, response.text
    data = response.json()["data"]
    assert data["status"] == "running" and data["attempt"] == 2
    assert data["payload"] == {"n": 1} and data["worker_id"] == worker
    assert [(x["execution_seq"], x["attempt"], x["status"]) for x in data["executions"]] == [
        (1, 1, "failed"),
        (2, 2, "running"),
    ]
    assert data["executions"][0]["error"] == "first try failed"


# ---------------------------------------------------------------------------------------
# Cancel, retry, replay
# ---------------------------------------------------------------------------------------


def test_cancel_then_cancel_again_is_a_conflict(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    member = add_user(conn, tenant, Role.MEMBER)
    job = enqueue(conn, tenant)
    with web_client(db_url) as client:
        first = client.post(f"/api/v1/jobs/{job}/cancel", headers=member.headers)
        assert first.status_code == 200, first.text
        assert first.json()["data"]["status"] == "cancelled"
        second = client.post(f"/api/v1/jobs/{job}/cancel", headers=member.headers)
    assert second.status_code == 409
    assert second.json()["error"]["code"] == "illegal_transition"


def test_retrying_a_dead_lettered_job_requeues_it_with_fresh_attempts(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    member = add_user(conn, tenant, Role.MEMBER)
    job, letter = dead_letter(conn, tenant)
    waiting = enqueue(conn, tenant)
    with web_client(db_url) as client:
        retried = client.post(f"/api/v1/jobs/{job}/retry", headers=member.headers)
        assert retried.status_code == 200, retried.text
        data = retried.json()["data"]
        assert (data["id"], data["status"], data["attempt"]) == (job, "queued", 0)
        assert retried.json()["meta"] == {"dead_letter_id": letter}

        again = client.post(f"/api/v1/jobs/{job}/retry", headers=member.headers)
        assert again.status_code == 409
        assert "only a dead-lettered job can be retried" in again.json()["error"]["message"]
        not_dead = client.post(f"/api/v1/jobs/{waiting}/retry", headers=member.headers)
        assert not_dead.status_code == 409
    replayed = conn.execute(
        "SELECT replayed_job_id FROM codity.dead_letters WHERE id = %s", [letter]
    ).fetchone()
    assert replayed == (job,)


def test_replaying_one_dead_letter_twice_is_a_conflict(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    member = add_user(conn, tenant, Role.MEMBER)
    viewer = add_user(conn, tenant, Role.VIEWER)
    job, letter = dead_letter(conn, tenant)
    with web_client(db_url) as client:
        shown = client.get(f"/api/v1/dead-letters/{letter}", headers=viewer.headers)
        assert shown.status_code == 200
        assert shown.json()["data"]["payload"] == {"n": 1}
        assert shown.json()["data"]["reason"] == "failed: not retryable"
        first = client.post(f"/api/v1/dead-letters/{letter}/replay", headers=member.headers)
        assert first.status_code == 200, first.text
        assert first.json()["data"] == {"dead_letter_id": letter, "job_id": job, "status": "queued"}
        second = client.post(f"/api/v1/dead-letters/{letter}/replay", headers=member.headers)
        assert second.status_code == 409
        assert second.json()["error"]["code"] == "conflict"
        listed = client.get(
            "/api/v1/dead-letters", params={"replayed": "true"}, headers=viewer.headers
        ).json()["data"]
    assert [d["id"] for d in listed] == [letter]
    assert listed[0]["replayed_job_id"] == job


def test_replay_all_replays_only_what_the_filter_matches(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    create_queue(conn, tenant, "reports")
    admin = add_user(conn, tenant, Role.ADMIN)
    emails = [dead_letter(conn, tenant, "emails", "emails.send")[1] for _ in range(3)]
    digest = dead_letter(conn, tenant, "emails", "emails.digest")[1]
    reports = [dead_letter(conn, tenant, "reports", "reports.build")[1] for _ in range(2)]
    with web_client(db_url) as client:
        by_task = client.post(
            "/api/v1/dead-letters/replay",
            json={"queue": "emails", "task": "emails.send", "limit": 2},
            headers=admin.headers,
        )
        assert by_task.status_code == 200, by_task.text
        assert by_task.json()["data"]["count"] == 2
        assert by_task.json()["data"]["dead_letter_ids"] == emails[:2]

        left = client.get(
            "/api/v1/dead-letters",
            params={"replayed": "false", "limit": 2},
            headers=admin.headers,
        ).json()
        assert [d["id"] for d in left["data"]] == sorted([emails[2], digest, *reports])[::-1][:2]
        assert left["meta"]["next_cursor"] is not None

        old = client.post(
            "/api/v1/dead-letters/replay",
            json={"dead_before": "2000-01-01T00:00:00Z"},
            headers=admin.headers,
        )
        assert old.json()["data"]["count"] == 0
        rest = client.post("/api/v1/dead-letters/replay", json={}, headers=admin.headers)
        assert rest.json()["data"]["count"] == 4
        assert sorted(rest.json()["data"]["dead_letter_ids"]) == sorted(
            [emails[2], digest, *reports]
        )
        unknown = client.post(
            "/api/v1/dead-letters/replay", json={"queue": "nope"}, headers=admin.headers
        )
        assert unknown.status_code == 404
        too_many = client.post(
            "/api/v1/dead-letters/replay", json={"limit": 1001}, headers=admin.headers
        )
        assert too_many.status_code == 422


def test_two_interleaved_replay_alls_never_replay_one_letter_twice(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    """A holds its picks uncommitted; B runs meanwhile, neither waits nor fails, and takes
    only the others. Without SKIP LOCKED, B would block on A's rows (and time out here)."""
    letters = {dead_letter(conn, tenant)[1] for _ in range(6)}
    replay = "SELECT dead_letter_id FROM codity.replay_dead_letters(%s, NULL, NULL, NULL, %s)"
    with psycopg.connect(db_url) as a, psycopg.connect(db_url) as b:
        a_ids = {r[0] for r in a.execute(replay, [tenant.project_id, 2]).fetchall()}
        b.execute("SET lock_timeout = '2s'")
        b_ids = {r[0] for r in b.execute(replay, [tenant.project_id, 1000]).fetchall()}
        a.commit()
        b.commit()
    assert len(a_ids) == 2 and a_ids.isdisjoint(b_ids)
    assert a_ids | b_ids == letters
    replays = conn.execute(
        "SELECT count(*), count(DISTINCT replayed_job_id) FROM codity.dead_letters"
        " WHERE replayed_at IS NOT NULL"
    ).fetchone()
    assert replays == (6, 6)


def test_two_replicas_replaying_all_at_once_replay_each_letter_once(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    admin = add_user(conn, tenant, Role.ADMIN)
    letters = {dead_letter(conn, tenant)[1] for _ in range(30)}
    start = threading.Barrier(2)

    def replay_all(_: int) -> list[int]:
        with web_client(db_url) as client:
            start.wait()
            response = client.post(
                "/api/v1/dead-letters/replay", json={"limit": 1000}, headers=admin.headers
            )
        assert response.status_code == 200, response.text
        ids: list[int] = response.json()["data"]["dead_letter_ids"]
        return ids

    with ThreadPoolExecutor(2) as pool:
        first, second = pool.map(replay_all, range(2))
    assert set(first).isdisjoint(second)
    assert sorted(first + second) == sorted(letters)
    jobs = conn.execute(
        "SELECT count(*) FROM codity.jobs WHERE status = 'queued' AND attempt = 0"
    ).fetchone()
    assert jobs == (30,)


# ---------------------------------------------------------------------------------------
# Rate limit
# ---------------------------------------------------------------------------------------


def _away_from_a_minute_boundary(conn: psycopg.Connection) -> None:
    """The enqueue window is a fixed minute of database time; start well inside one.

    Called with the app already up, right before the requests, which take a fraction of a
    second: 10 s of margin is plenty, and waits (up to 11 s) only one run in six.
    """
    row = conn.execute("SELECT extract(second FROM now())::float8").fetchone()
    assert row is not None
    if row[0] > 50:
        conn.execute("SELECT pg_sleep(%s)", [61 - row[0]])


def test_enqueue_rate_limit_admits_exactly_the_limit_under_concurrency(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    member = add_user(conn, tenant, Role.MEMBER)
    settings = dataclasses.replace(SETTINGS, enqueues_per_minute=10)
    with web_client(db_url, settings) as client:
        _away_from_a_minute_boundary(conn)

        def one(i: int) -> httpx.Response:
            return client.post(
                "/api/v1/jobs", json={"queue": "emails", "task": f"t{i}"}, headers=member.headers
            )

        with ThreadPoolExecutor(8) as pool:
            responses = list(pool.map(one, range(16)))
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [201] * 10 + [429] * 6
    refused = next(r for r in responses if r.status_code == 429)
    assert int(refused.headers["retry-after"]) >= 1
    assert refused.json()["error"]["code"] == "rate_limited"
    assert conn.execute("SELECT count(*) FROM codity.jobs").fetchone() == (10,)


def test_a_batch_that_would_pass_the_limit_is_refused_whole(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    member = add_user(conn, tenant, Role.MEMBER)
    settings = dataclasses.replace(SETTINGS, enqueues_per_minute=10)
    with web_client(db_url, settings) as client:
        _away_from_a_minute_boundary(conn)
        post = client.post
        eight = post(
            "/api/v1/jobs/batch",
            json={"queue": "emails", "jobs": [{"task": "t"}] * 8},
            headers=member.headers,
        )
        assert eight.status_code == 201, eight.text
        three = post(
            "/api/v1/jobs/batch",
            json={"queue": "emails", "jobs": [{"task": "t"}] * 3},
            headers=member.headers,
        )
        assert three.status_code == 429
        assert "retry-after" in three.headers
        two = post(
            "/api/v1/jobs/batch",
            json={"queue": "emails", "jobs": [{"task": "t"}] * 2},
            headers=member.headers,
        )
        assert two.status_code == 201
        last = post("/api/v1/jobs", json={"queue": "emails", "task": "t"}, headers=member.headers)
        assert last.status_code == 429
    assert conn.execute("SELECT count(*) FROM codity.jobs").fetchone() == (10,)


# ---------------------------------------------------------------------------------------
# Workers and the overview
# ---------------------------------------------------------------------------------------


def test_workers_are_listed_with_liveness_and_held_jobs(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    viewer = add_user(conn, tenant, Role.VIEWER)
    busy = register_worker(conn, tenant, "busy", "emails")
    gone = register_worker(conn, tenant, "gone", "emails")
    silent = register_worker(conn, tenant, "silent", "emails")
    conn.execute("SELECT codity.deregister_worker(%s)", [gone])
    conn.execute(
        "UPDATE codity.workers SET last_heartbeat_at = now() - interval '1 minute' WHERE id = %s",
        [silent],
    )
    enqueue(conn, tenant)
    claim_and_start(conn, tenant, busy)
    other = make_tenant(conn)
    create_queue(conn, other)
    register_worker(conn, other, "foreign", "emails")

    with web_client(db_url) as client:
        listed = client.get("/api/v1/workers", headers=viewer.headers)
        assert listed.status_code == 200, listed.text
        workers = {w["name"]: w for w in listed.json()["data"]}
        active = client.get(
            "/api/v1/workers", params={"status": "active"}, headers=viewer.headers
        ).json()["data"]
        paged = client.get("/api/v1/workers", params={"limit": 2}, headers=viewer.headers).json()
    assert set(workers) == {"busy", "gone", "silent"}
    assert workers["busy"]["is_alive"] and workers["busy"]["jobs_held"] == 1
    assert workers["busy"]["queues"] == ["emails"] and workers["busy"]["host"] == "host-a"
    assert workers["gone"]["status"] == "stopped" and not workers["gone"]["is_alive"]
    assert workers["silent"]["status"] == "active" and not workers["silent"]["is_alive"]
    assert workers["silent"]["heartbeat_age_seconds"] >= 59
    assert {w["name"] for w in active} == {"busy", "silent"}
    assert [w["name"] for w in paged["data"]] == ["silent", "gone"]
    assert paged["meta"]["next_cursor"] is not None


def test_overview_counts_jobs_per_queue_and_state(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    create_queue(conn, tenant, "reports")
    create_queue(conn, tenant, "idle")
    viewer = add_user(conn, tenant, Role.VIEWER)
    enqueue(conn, tenant)  # claimable
    later = enqueue(conn, tenant)
    conn.execute("UPDATE codity.jobs SET run_at = now() + interval '1 hour' WHERE id = %s", [later])
    cancelled = enqueue(conn, tenant)
    conn.execute("SELECT * FROM codity.cancel(%s)", [cancelled])
    dead_letter(conn, tenant, "reports")  # registers a live worker, leaves one dead letter
    enqueue(conn, tenant, "reports")
    worker = register_worker(conn, tenant, "runner", "reports")
    claim_and_start(conn, tenant, worker, "reports")  # running
    other = make_tenant(conn)
    create_queue(conn, other)
    enqueue(conn, other)

    with web_client(db_url) as client:
        response = client.get("/api/v1/overview", headers=viewer.headers)
    assert response.status_code == 200, response.text
    data = response.json()["data"]
    queues = {q["queue"]: q for q in data["queues"]}
    assert set(queues) == {"emails", "reports", "idle"}
    counts = ("claimable", "scheduled", "running", "completed", "failed", "dead_letter")
    emails = {k: queues["emails"][k] for k in ("queue", "is_paused", *counts, "cancelled", "total")}
    assert emails | {"queue": "", "is_paused": False} == {
        "queue": "",
        "is_paused": False,
        "claimable": 1,
        "scheduled": 1,
        "running": 0,
        "completed": 0,
        "failed": 0,
        "dead_letter": 0,
        "cancelled": 1,
        "total": 3,
    }
    assert (queues["reports"]["dead_letter"], queues["reports"]["running"]) == (1, 1)
    assert queues["idle"]["total"] == 0
    assert data["totals"]["total"] == 5 and data["totals"]["claimable"] == 1
    assert data["workers_alive"] == 2
    assert data["dead_letters_unreplayed"] == 1


# ---------------------------------------------------------------------------------------
# Tenant isolation
# ---------------------------------------------------------------------------------------


def test_another_projects_ids_answer_exactly_like_missing_ones(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    admin = add_user(conn, tenant, Role.ADMIN)
    key = api_key(conn, tenant, Role.ADMIN)
    other = make_tenant(conn)
    create_queue(conn, other)
    foreign_job, foreign_letter = dead_letter(conn, other)
    foreign_waiting = enqueue(conn, other)
    missing = 2**62
    beyond = 2**64

    requests = [
        ("GET", "/api/v1/jobs/{}", foreign_job),
        ("POST", "/api/v1/jobs/{}/cancel", foreign_waiting),
        ("POST", "/api/v1/jobs/{}/retry", foreign_job),
        ("GET", "/api/v1/dead-letters/{}", foreign_letter),
        ("POST", "/api/v1/dead-letters/{}/replay", foreign_letter),
    ]
    with web_client(db_url) as client:
        for headers in (admin.headers, bearer(key)):
            for method, path, foreign in requests:
                answers = [
                    client.request(method, path.format(i), headers=headers)
                    for i in (foreign, missing, beyond, 0)
                ]
                assert [a.status_code for a in answers] == [404] * 4, (path, answers[0].text)
                bodies = [without_request_id(a) for a in answers]
                assert all(b == bodies[0] for b in bodies), (path, bodies)
        listed = client.get("/api/v1/jobs", headers=admin.headers).json()["data"]
        letters = client.get("/api/v1/dead-letters", headers=admin.headers).json()["data"]
        replay_all = client.post("/api/v1/dead-letters/replay", json={}, headers=admin.headers)
    assert listed == [] and letters == []
    assert replay_all.json()["data"]["count"] == 0
    untouched = conn.execute(
        "SELECT status::text FROM codity.jobs WHERE id = ANY(%s) ORDER BY id",
        [[foreign_job, foreign_waiting]],
    ).fetchall()
    assert untouched == [("dead_letter",), ("queued",)]
