"""Schedules over HTTP: CRUD, pause/resume, run now, next runs, roles and tenant isolation.

Next-run arithmetic across daylight-saving changes is proven in SQL with a fixed p_now
(codity.schedule_next_runs); over HTTP "now" is the database's, so those tests check only
what holds at any time (in the future, 15 minutes apart).
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from typing import Any

import psycopg
import pytest
from starlette.testclient import TestClient

from codity.web.access import Role
from tests.webapp import Tenant, add_user, api_key, bearer, make_tenant, web_client

SCHEDULES = "/api/v1/schedules"

NIGHTLY = {
    "name": "nightly-report",
    "queue": "reports",
    "cron": "0 2 * * *",
    "time_zone": "Europe/London",
    "task": "reports.nightly",
    "payload": {"format": "pdf", "pages": [1, 2]},
    "priority": 5,
}


def add_queue(conn: psycopg.Connection, tenant: Tenant, name: str = "reports") -> None:
    conn.execute("SELECT codity.create_queue(%s, %s)", [name, tenant.project_id])


def add_schedule(
    conn: psycopg.Connection,
    tenant: Tenant,
    name: str,
    cron: str = "0 2 * * *",
    time_zone: str = "UTC",
) -> None:
    conn.execute(
        "SELECT * FROM codity.create_schedule(%s, 'reports', %s, 'reports.nightly', '{}',"
        " %s, 0, %s)",
        [name, cron, time_zone, tenant.project_id],
    )


def at(value: str) -> datetime:
    return datetime.fromisoformat(value)


def error_of(response: Any) -> dict[str, Any]:
    """The error envelope without its request id, which differs on every response."""
    error = dict(response.json()["error"])
    error.pop("request_id")
    return error


def next_run_at(conn: psycopg.Connection, tenant: Tenant, name: str) -> datetime:
    row = conn.execute(
        "SELECT next_run_at FROM codity.scheduled_jobs WHERE project_id = %s AND name = %s",
        [tenant.project_id, name],
    ).fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


# ---------------------------------------------------------------------------------------
# CRUD
# ---------------------------------------------------------------------------------------


def test_schedule_crud_round_trip(db_url: str, conn: psycopg.Connection) -> None:
    tenant = make_tenant(conn)
    add_queue(conn, tenant)
    add_queue(conn, tenant, "emails")
    admin = add_user(conn, tenant, Role.ADMIN)
    with web_client(db_url) as client:
        created = client.post(SCHEDULES, json=NIGHTLY, headers=admin.headers)
        assert created.status_code == 201, created.text
        data = created.json()["data"]
        assert {k: data[k] for k in NIGHTLY} == NIGHTLY
        assert data["is_paused"] is False
        assert data["last_run_at"] is None
        assert at(data["next_run_at"]) > datetime.now(UTC)

        one = client.get(f"{SCHEDULES}/nightly-report", headers=admin.headers)
        assert one.status_code == 200
        assert one.json()["data"] == data
        listed = client.get(SCHEDULES, headers=admin.headers).json()
        assert [s["name"] for s in listed["data"]] == ["nightly-report"]
        assert listed["meta"] == {"next_cursor": None, "limit": 50}

        # A change that keeps cron and zone keeps the timetable.
        moved = client.patch(
            f"{SCHEDULES}/nightly-report",
            json={"task": "reports.weekly", "queue": "emails", "priority": -3},
            headers=admin.headers,
        )
        assert moved.status_code == 200, moved.text
        moved_data = moved.json()["data"]
        assert (moved_data["task"], moved_data["queue"], moved_data["priority"]) == (
            "reports.weekly",
            "emails",
            -3,
        )
        assert moved_data["cron"] == "0 2 * * *"
        assert moved_data["payload"] == NIGHTLY["payload"]
        assert moved_data["next_run_at"] == data["next_run_at"]

        # A new expression recomputes the next run from now.
        every_minute = client.patch(
            f"{SCHEDULES}/nightly-report", json={"cron": "* * * * *"}, headers=admin.headers
        )
        assert every_minute.status_code == 200, every_minute.text
        retimed = every_minute.json()["data"]
        assert retimed["cron"] == "* * * * *"
        assert retimed["task"] == "reports.weekly"
        assert at(retimed["next_run_at"]) <= datetime.now(UTC) + timedelta(minutes=1)
        assert at(retimed["next_run_at"]) != at(data["next_run_at"])

        # An empty or all-null change is no change.
        same = client.patch(
            f"{SCHEDULES}/nightly-report", json={"task": None}, headers=admin.headers
        )
        assert same.status_code == 200
        assert same.json()["data"] == retimed

        deleted = client.delete(f"{SCHEDULES}/nightly-report", headers=admin.headers)
        assert deleted.status_code == 204
        assert deleted.content == b""
        assert client.get(f"{SCHEDULES}/nightly-report", headers=admin.headers).status_code == 404
        again = client.delete(f"{SCHEDULES}/nightly-report", headers=admin.headers)
        assert again.status_code == 404
        assert client.get(SCHEDULES, headers=admin.headers).json()["data"] == []


def test_deleting_a_schedule_keeps_the_jobs_it_created(
    db_url: str, conn: psycopg.Connection
) -> None:
    tenant = make_tenant(conn)
    add_queue(conn, tenant)
    add_schedule(conn, tenant, "nightly")
    admin = add_user(conn, tenant, Role.ADMIN)
    with web_client(db_url) as client:
        run = client.post(f"{SCHEDULES}/nightly/run", headers=admin.headers)
        assert run.status_code == 201, run.text
        assert client.delete(f"{SCHEDULES}/nightly", headers=admin.headers).status_code == 204
    job = conn.execute(
        "SELECT status::text, schedule_id FROM codity.jobs WHERE id = %s",
        [run.json()["data"]["job_id"]],
    ).fetchone()
    assert job == ("queued", None)


def test_creating_a_taken_name_is_a_conflict_that_changes_nothing(
    db_url: str, conn: psycopg.Connection
) -> None:
    tenant = make_tenant(conn)
    add_queue(conn, tenant)
    admin = add_user(conn, tenant, Role.ADMIN)
    with web_client(db_url) as client:
        assert client.post(SCHEDULES, json=NIGHTLY, headers=admin.headers).status_code == 201
        before = client.get(f"{SCHEDULES}/nightly-report", headers=admin.headers).json()["data"]
        duplicate = client.post(
            SCHEDULES,
            json={**NIGHTLY, "cron": "*/5 * * * *", "task": "other.task"},
            headers=admin.headers,
        )
        assert duplicate.status_code == 409, duplicate.text
        assert duplicate.json()["error"]["code"] == "conflict"
        assert "nightly-report" in duplicate.json()["error"]["message"]
        after = client.get(f"{SCHEDULES}/nightly-report", headers=admin.headers).json()["data"]
        assert after == before


def test_bad_cron_and_bad_time_zone_are_422_naming_the_problem(
    db_url: str, conn: psycopg.Connection
) -> None:
    tenant = make_tenant(conn)
    add_queue(conn, tenant)
    admin = add_user(conn, tenant, Role.ADMIN)
    with web_client(db_url) as client:
        bad_cron = client.post(
            SCHEDULES, json={**NIGHTLY, "cron": "61 * * * *"}, headers=admin.headers
        )
        assert bad_cron.status_code == 422, bad_cron.text
        error = bad_cron.json()["error"]
        assert error["code"] == "invalid_input"
        assert "minute" in error["message"] and "61" in error["message"]
        assert error["details"]["field"] == "cron"
        assert "61 is outside 0-59" in error["details"]["detail"]

        six_fields = client.post(
            SCHEDULES, json={**NIGHTLY, "cron": "0 0 2 * * *"}, headers=admin.headers
        )
        assert six_fields.status_code == 422
        assert "expected 5 fields, got 6" in six_fields.json()["error"]["message"]

        bad_zone = client.post(
            SCHEDULES, json={**NIGHTLY, "time_zone": "Mars/Olympus_Mons"}, headers=admin.headers
        )
        assert bad_zone.status_code == 422, bad_zone.text
        error = bad_zone.json()["error"]
        assert error["message"] == 'unknown time zone "Mars/Olympus_Mons"'
        assert error["details"]["field"] == "time_zone"
        assert "SELECT" not in bad_zone.text

        no_queue = client.post(SCHEDULES, json={**NIGHTLY, "queue": "nope"}, headers=admin.headers)
        assert no_queue.status_code == 404
        assert error_of(no_queue) == {"code": "not_found", "message": "queue not found"}

        assert client.post(f"{SCHEDULES}", json=NIGHTLY, headers=admin.headers).status_code == 201
        bad_patch = client.patch(
            f"{SCHEDULES}/nightly-report", json={"cron": "* * 32 * *"}, headers=admin.headers
        )
        assert bad_patch.status_code == 422
        assert "day-of-month" in bad_patch.json()["error"]["message"]
    assert conn.execute("SELECT count(*) FROM codity.scheduled_jobs").fetchone() == (1,)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"name": "has space"}, "name"),
        ({"name": "a/b"}, "name"),
        ({"name": "x" * 201}, "name"),
        ({"cron": "*" * 201}, "cron"),
        ({"priority": 1001}, "priority"),
        ({"task": "a\u0000b"}, "task"),
        ({"cron": "\u0000"}, "cron"),
        ({"time_zone": "Europe/London\u0000"}, "time_zone"),
        ({"payload": [1, 2]}, "payload"),
        ({"id": 7}, "id"),
        ({"is_paused": True}, "is_paused"),
        ({"next_run_at": "2030-01-01T00:00:00Z"}, "next_run_at"),
    ],
)
def test_bad_or_server_owned_fields_are_rejected(
    db_url: str, conn: psycopg.Connection, change: dict[str, Any], field: str
) -> None:
    tenant = make_tenant(conn)
    add_queue(conn, tenant)
    admin = add_user(conn, tenant, Role.ADMIN)
    with web_client(db_url) as client:
        response = client.post(SCHEDULES, json={**NIGHTLY, **change}, headers=admin.headers)
    assert response.status_code == 422, response.text
    locations = [p["location"] for p in response.json()["error"]["details"]]
    assert ["body", field] in locations


def test_payload_over_64_kb_or_holding_nul_is_422(db_url: str, conn: psycopg.Connection) -> None:
    tenant = make_tenant(conn)
    add_queue(conn, tenant)
    admin = add_user(conn, tenant, Role.ADMIN)
    with web_client(db_url) as client:
        response = client.post(
            SCHEDULES, json={**NIGHTLY, "payload": {"blob": "x" * 70_000}}, headers=admin.headers
        )
        assert response.status_code == 422, response.text
        assert "65536" in response.json()["error"]["message"]
        assert "xxxx" not in response.text
        nul = client.post(
            SCHEDULES, json={**NIGHTLY, "payload": {"k": "a\u0000b"}}, headers=admin.headers
        )
        assert nul.status_code == 422, nul.text


def test_list_pages_by_name_without_gaps_or_repeats(db_url: str, conn: psycopg.Connection) -> None:
    tenant = make_tenant(conn)
    add_queue(conn, tenant)
    names = [f"s-{i:02d}" for i in range(7)]
    for name in reversed(names):
        add_schedule(conn, tenant, name)
    viewer = add_user(conn, tenant, Role.VIEWER)
    seen: list[str] = []
    with web_client(db_url) as client:
        params: dict[str, Any] = {"limit": 3}
        while True:
            page = client.get(SCHEDULES, params=params, headers=viewer.headers)
            assert page.status_code == 200, page.text
            body = page.json()
            seen += [s["name"] for s in body["data"]]
            if body["meta"]["next_cursor"] is None:
                break
            params = {"limit": 3, "cursor": body["meta"]["next_cursor"]}
        assert seen == names
        for cursor in ["***", "é", base64.urlsafe_b64encode(b"\xff\xfe").decode()]:
            bad = client.get(SCHEDULES, params={"cursor": cursor}, headers=viewer.headers)
            assert bad.status_code == 422, (cursor, bad.text)
        assert client.get(SCHEDULES, params={"limit": 0}, headers=viewer.headers).status_code == 422
        assert client.get(SCHEDULES, params={"limit": 201}, headers=viewer.headers).status_code == (
            422
        )


# ---------------------------------------------------------------------------------------
# Pause, resume, run now, next runs
# ---------------------------------------------------------------------------------------


def test_pause_and_resume_report_whether_they_changed_anything(
    db_url: str, conn: psycopg.Connection
) -> None:
    tenant = make_tenant(conn)
    add_queue(conn, tenant)
    add_schedule(conn, tenant, "nightly")
    admin = add_user(conn, tenant, Role.ADMIN)
    one = f"{SCHEDULES}/nightly"
    with web_client(db_url) as client:
        paused = client.post(one + "/pause", headers=admin.headers)
        assert paused.status_code == 200, paused.text
        assert paused.json()["data"] == {"name": "nightly", "is_paused": True, "changed": True}
        assert client.get(one, headers=admin.headers).json()["data"]["is_paused"] is True
        again = client.post(one + "/pause", headers=admin.headers).json()["data"]
        assert again["changed"] is False
        resumed = client.post(one + "/resume", headers=admin.headers).json()["data"]
        assert resumed == {"name": "nightly", "is_paused": False, "changed": True}
        assert client.get(one, headers=admin.headers).json()["data"]["is_paused"] is False
        assert client.post(one + "/resume", headers=admin.headers).json()["data"]["changed"] is (
            False
        )


def test_member_runs_a_schedule_now_without_moving_its_timetable(
    db_url: str, conn: psycopg.Connection
) -> None:
    tenant = make_tenant(conn)
    add_queue(conn, tenant)
    conn.execute(
        "SELECT * FROM codity.create_schedule('nightly', 'reports', '0 2 * * *',"
        " 'reports.nightly', '{\"format\": \"csv\"}', 'Europe/London', 7, %s)",
        [tenant.project_id],
    )
    (schedule_id,) = conn.execute(
        "SELECT id FROM codity.scheduled_jobs WHERE project_id = %s", [tenant.project_id]
    ).fetchone() or (None,)
    before = next_run_at(conn, tenant, "nightly")
    member = add_user(conn, tenant, Role.MEMBER)
    key = api_key(conn, tenant, Role.MEMBER)
    with web_client(db_url) as client:
        run = client.post(f"{SCHEDULES}/nightly/run", headers=member.headers)
        assert run.status_code == 201, run.text
        job_id = run.json()["data"]["job_id"]
        assert run.json()["data"] == {"job_id": job_id, "schedule": "nightly"}
        by_key = client.post(f"{SCHEDULES}/nightly/run", headers=bearer(key))
        assert by_key.status_code == 201, by_key.text
        assert by_key.json()["data"]["job_id"] != job_id
    job = conn.execute(
        "SELECT j.status::text, j.task, j.payload, j.priority, j.schedule_id, q.name,"
        "       j.run_at <= now(), j.idempotency_key"
        " FROM codity.jobs j JOIN codity.queues q ON q.id = j.queue_id WHERE j.id = %s",
        [job_id],
    ).fetchone()
    assert job == ("queued", "reports.nightly", {"format": "csv"}, 7, schedule_id, "reports",
                   True, None)  # fmt: skip
    assert next_run_at(conn, tenant, "nightly") == before
    assert conn.execute(
        "SELECT last_run_at, last_job_id FROM codity.scheduled_jobs WHERE id = %s", [schedule_id]
    ).fetchone() == (None, None)


def test_a_paused_schedule_can_still_be_run_by_hand(db_url: str, conn: psycopg.Connection) -> None:
    tenant = make_tenant(conn)
    add_queue(conn, tenant)
    add_schedule(conn, tenant, "nightly")
    conn.execute("SELECT codity.pause_schedule('nightly', %s)", [tenant.project_id])
    member = add_user(conn, tenant, Role.MEMBER)
    with web_client(db_url) as client:
        assert client.post(f"{SCHEDULES}/nightly/run", headers=member.headers).status_code == 201


def test_next_runs_of_every_quarter_hour_are_15_minutes_apart_in_the_future(
    db_url: str, conn: psycopg.Connection
) -> None:
    tenant = make_tenant(conn)
    add_queue(conn, tenant)
    add_schedule(conn, tenant, "quarterly", cron="*/15 * * * *", time_zone="Europe/London")
    viewer = add_user(conn, tenant, Role.VIEWER)
    url = f"{SCHEDULES}/quarterly/next-runs"
    with web_client(db_url) as client:
        started = datetime.now(UTC)
        response = client.get(url, params={"count": 8}, headers=viewer.headers)
        assert response.status_code == 200, response.text
        data = response.json()["data"]
        assert (data["name"], data["cron"], data["time_zone"]) == (
            "quarterly",
            "*/15 * * * *",
            "Europe/London",
        )
        runs = [at(r["run_at"]) for r in data["runs"]]
        assert len(runs) == 8
        assert runs[0] > started - timedelta(seconds=1)
        assert runs[0] <= started + timedelta(minutes=15)
        assert all(run.minute % 15 == 0 and run.second == 0 for run in runs)
        assert [b - a for a, b in pairwise(runs)] == [timedelta(minutes=15)] * 7
        default = client.get(url, headers=viewer.headers).json()["data"]["runs"]
        assert len(default) == 5
        for count in (0, 101, -1, "many"):
            bad = client.get(url, params={"count": count}, headers=viewer.headers)
            assert bad.status_code == 422, (count, bad.text)


def test_next_runs_follow_london_across_both_dst_changes(tx: psycopg.Connection) -> None:
    """In SQL with a fixed p_now: what the API's next-runs route answers on those days."""
    tenant = make_tenant(tx)
    add_queue(tx, tenant)
    add_schedule(tx, tenant, "quarterly", cron="*/15 * * * *", time_zone="Europe/London")
    add_schedule(tx, tenant, "half-past-one", cron="30 1 * * *", time_zone="Europe/London")

    def runs(name: str, count: int, now: str) -> list[tuple[str, str]]:
        return [
            (run_at.astimezone(UTC).strftime("%m-%d %H:%M"), local.strftime("%m-%d %H:%M"))
            for run_at, local in tx.execute(
                "SELECT run_at, local_time FROM codity.schedule_next_runs(%s, %s, %s, %s)",
                [name, count, tenant.project_id, now],
            )
        ]

    # Spring forward, 2024-03-31 01:00 UTC: local 01:00 GMT becomes 02:00 BST.
    # Elapsed time: still every 15 real minutes; the local clock jumps an hour.
    assert runs("quarterly", 4, "2024-03-31 00:20Z") == [
        ("03-31 00:30", "03-31 00:30"),
        ("03-31 00:45", "03-31 00:45"),
        ("03-31 01:00", "03-31 02:00"),
        ("03-31 01:15", "03-31 02:15"),
    ]
    # Wall clock: 01:30 does not exist that night, so it runs when the gap ends (02:00 BST).
    assert runs("half-past-one", 3, "2024-03-29 12:00Z") == [
        ("03-30 01:30", "03-30 01:30"),
        ("03-31 01:00", "03-31 02:00"),
        ("04-01 00:30", "04-01 01:30"),
    ]
    # Fall back, 2024-10-27 01:00 UTC: 01:30 happens twice; it runs once, at the first.
    assert runs("half-past-one", 2, "2024-10-26 12:00Z") == [
        ("10-27 00:30", "10-27 01:30"),
        ("10-28 01:30", "10-28 01:30"),
    ]
    # Elapsed time through the repeated hour: 15 real minutes apart, local 01:45 twice.
    assert runs("quarterly", 3, "2024-10-27 00:40Z") == [
        ("10-27 00:45", "10-27 01:45"),
        ("10-27 01:00", "10-27 01:00"),
        ("10-27 01:15", "10-27 01:15"),
    ]
    with pytest.raises(psycopg.Error) as bad_count, tx.transaction():
        runs("quarterly", 101, "2024-01-01Z")
    assert bad_count.value.sqlstate == "CD010"
    with pytest.raises(psycopg.Error) as missing, tx.transaction():
        runs("nope", 1, "2024-01-01Z")
    assert missing.value.sqlstate == "CD006"


def test_run_now_and_delete_in_sql_raise_cd006_for_a_missing_schedule(
    tx: psycopg.Connection,
) -> None:
    for call in (
        "SELECT codity.run_schedule_now('nope')",
        "SELECT codity.delete_schedule('nope')",
    ):
        with pytest.raises(psycopg.Error) as missing, tx.transaction():
            tx.execute(call)
        assert missing.value.sqlstate == "CD006"


# ---------------------------------------------------------------------------------------
# Roles
# ---------------------------------------------------------------------------------------

ROUTES_BY_ROLE: list[tuple[str, str, dict[str, Any] | None, Role]] = [
    ("GET", SCHEDULES, None, Role.VIEWER),
    ("POST", SCHEDULES, {**NIGHTLY, "name": "new-one"}, Role.ADMIN),
    ("GET", f"{SCHEDULES}/nightly", None, Role.VIEWER),
    ("PATCH", f"{SCHEDULES}/nightly", {"priority": 1}, Role.ADMIN),
    ("POST", f"{SCHEDULES}/nightly/pause", None, Role.ADMIN),
    ("POST", f"{SCHEDULES}/nightly/resume", None, Role.ADMIN),
    ("POST", f"{SCHEDULES}/nightly/run", None, Role.MEMBER),
    ("GET", f"{SCHEDULES}/nightly/next-runs", None, Role.VIEWER),
    ("DELETE", f"{SCHEDULES}/nightly", None, Role.ADMIN),
]


def _send(client: TestClient, method: str, url: str, body: Any, headers: dict[str, str]) -> Any:
    return client.request(method, url, json=body, headers=headers)


def test_each_role_reaches_exactly_the_routes_its_rank_allows(
    db_url: str, conn: psycopg.Connection
) -> None:
    tenant = make_tenant(conn)
    add_queue(conn, tenant)
    add_schedule(conn, tenant, "nightly")
    users = {role: add_user(conn, tenant, role) for role in Role}
    with web_client(db_url) as client:
        for role in (Role.VIEWER, Role.MEMBER, Role.ADMIN, Role.OWNER):
            for method, url, body, needed in ROUTES_BY_ROLE:
                if role >= needed and method == "DELETE":
                    continue  # deleting is checked once, last
                response = _send(client, method, url, body, users[role].headers)
                if role < needed:
                    assert response.status_code == 403, (role, method, url, response.text)
                    assert needed.label in response.json()["error"]["message"]
                else:
                    assert response.status_code < 300, (role, method, url, response.text)
                    if method == "POST" and url == SCHEDULES:
                        conn.execute("SELECT codity.delete_schedule('new-one', %s)",
                                     [tenant.project_id])  # fmt: skip
        deleted = client.delete(f"{SCHEDULES}/nightly", headers=users[Role.ADMIN].headers)
        assert deleted.status_code == 204


def test_viewer_cannot_create_a_schedule(db_url: str, conn: psycopg.Connection) -> None:
    tenant = make_tenant(conn)
    add_queue(conn, tenant)
    viewer = add_user(conn, tenant, Role.VIEWER)
    viewer_key = api_key(conn, tenant, Role.VIEWER)
    with web_client(db_url) as client:
        for headers in (viewer.headers, bearer(viewer_key)):
            response = client.post(SCHEDULES, json=NIGHTLY, headers=headers)
            assert response.status_code == 403, response.text
            assert response.json()["error"]["code"] == "forbidden"
    assert conn.execute("SELECT count(*) FROM codity.scheduled_jobs").fetchone() == (0,)


# ---------------------------------------------------------------------------------------
# Tenant isolation
# ---------------------------------------------------------------------------------------


def test_another_orgs_schedule_of_the_same_name_answers_like_a_missing_one(
    db_url: str, conn: psycopg.Connection
) -> None:
    ours = make_tenant(conn)
    theirs = make_tenant(conn)
    add_queue(conn, ours)
    add_queue(conn, theirs)
    add_queue(conn, theirs, "theirs-only")
    add_schedule(conn, theirs, "nightly")
    before = conn.execute("SELECT * FROM codity.scheduled_jobs").fetchall()
    owner = add_user(conn, ours, Role.OWNER)
    key = api_key(conn, ours, Role.ADMIN)
    with web_client(db_url) as client:
        for headers in (owner.headers, bearer(key)):
            for method, path, body in [
                ("GET", "", None),
                ("PATCH", "", {"priority": 9}),
                ("POST", "/pause", None),
                ("POST", "/resume", None),
                ("POST", "/run", None),
                ("GET", "/next-runs", None),
                ("DELETE", "", None),
            ]:
                foreign = _send(client, method, f"{SCHEDULES}/nightly{path}", body, headers)
                missing = _send(client, method, f"{SCHEDULES}/never-was{path}", body, headers)
                assert foreign.status_code == missing.status_code == 404, (method, path)
                assert error_of(foreign) == error_of(missing), (method, path)
                assert error_of(foreign) == {"code": "not_found", "message": "schedule not found"}
                assert set(foreign.headers) == set(missing.headers)
            assert client.get(SCHEDULES, headers=headers).json()["data"] == []
            # Their queue, named in a body, is as missing as a queue nobody has.
            onto_theirs = client.post(
                SCHEDULES, json={**NIGHTLY, "queue": "theirs-only"}, headers=headers
            )
            onto_none = client.post(
                SCHEDULES, json={**NIGHTLY, "queue": "never-was"}, headers=headers
            )
            assert onto_theirs.status_code == onto_none.status_code == 404
            assert error_of(onto_theirs) == error_of(onto_none)
            assert "theirs-only" not in onto_theirs.text
            # Creating the same name in our project is ours alone.
            created = client.post(SCHEDULES, json={**NIGHTLY, "name": "nightly"}, headers=headers)
            assert created.status_code == 201, created.text
            conn.execute("SELECT codity.delete_schedule('nightly', %s)", [ours.project_id])
    after = conn.execute(
        "SELECT * FROM codity.scheduled_jobs WHERE project_id = %s", [theirs.project_id]
    ).fetchall()
    assert after == before
    assert conn.execute("SELECT count(*) FROM codity.jobs").fetchone() == (0,)


@pytest.mark.parametrize("name", ["%00", "x" * 201, "%20", "n%C3%A9e"])
def test_unusable_path_names_are_simply_not_found(
    db_url: str, conn: psycopg.Connection, name: str
) -> None:
    tenant = make_tenant(conn)
    admin = add_user(conn, tenant, Role.ADMIN)
    with web_client(db_url) as client:
        for method, path in [("GET", ""), ("POST", "/run"), ("GET", "/next-runs")]:
            response = client.request(method, f"{SCHEDULES}/{name}{path}", headers=admin.headers)
            assert response.status_code == 404, (name, method, response.text)
            assert error_of(response) == {"code": "not_found", "message": "schedule not found"}
