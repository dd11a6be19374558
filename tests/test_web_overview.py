"""The overview, queue stats and queue history over HTTP: capped counts, throughput from the
rollup plus the live minutes, live workers per queue, and the problems flagged.

Jobs run through the SQL API as the database owner (enqueue, claim, start, complete or
fail), at moved times where a minute in the past is needed; ``codity.roll_up`` closes the
minutes as the scheduler's tick would. The routes are then read as a viewer.
"""

from __future__ import annotations

import datetime as dt
import itertools
from typing import Any

import psycopg
import pytest
from starlette.testclient import TestClient

from codity.web.access import Role
from tests.sqlapi import NO_BACKOFF, create_queue, one, row
from tests.webapp import Tenant, User, add_user, make_tenant, web_client

Conn = psycopg.Connection[Any]
MINUTE = dt.timedelta(minutes=1)


# ---------------------------------------------------------------------------------------
# Scenes: what workers and time leave behind.
# ---------------------------------------------------------------------------------------


def queue(conn: Conn, tenant: Tenant, name: str, max_attempts: int = 1) -> int:
    """A queue whose failures dead-letter at once (one attempt) unless told otherwise."""
    return create_queue(
        conn, name, project_id=tenant.project_id, max_attempts=max_attempts, **NO_BACKOFF
    )


def enqueue(conn: Conn, tenant: Tenant, name: str, n: int = 1) -> list[int]:
    return [
        int(
            one(
                conn,
                "SELECT job_id FROM codity.enqueue(%s, 't', p_project_id => %s)",
                [name, tenant.project_id],
            )
        )
        for _ in range(n)
    ]


def finish(
    conn: Conn,
    tenant: Tenant,
    name: str,
    at: dt.datetime | None = None,
    *,
    n: int = 1,
    fail: bool = False,
) -> list[int]:
    """``n`` jobs enqueued, claimed, started and completed (or failed) at ``at`` (default:
    now) by a worker registered then, so it is not live unless ``at`` is now. Their ids."""
    now = at or one(conn, "SELECT now()")
    worker = one(
        conn,
        "SELECT codity.register_worker('runner', ARRAY[%s], 5, 'h', 1, %s, p_now => %s)",
        [name, tenant.project_id, now],
    )
    jobs = []
    for _ in range(n):
        job = one(
            conn,
            "SELECT job_id FROM codity.enqueue(%s, 't', p_project_id => %s, p_now => %s)",
            [name, tenant.project_id, now],
        )
        got, fence = row(
            conn,
            "SELECT job_id, fence FROM codity.claim(%s, %s, 1, p_now => %s)",
            [worker, name, now],
        )
        assert got == job, "the scene expects nothing else claimable in the queue"
        conn.execute("SELECT codity.start(%s, %s, p_now => %s)", [job, fence, now])
        if fail:
            conn.execute("SELECT codity.fail(%s, %s, 'Boom', p_now => %s)", [job, fence, now])
        else:
            conn.execute("SELECT codity.complete(%s, %s, p_now => %s)", [job, fence, now])
        jobs.append(int(job))
    return jobs


def live_worker(conn: Conn, tenant: Tenant, queues: list[str]) -> int:
    return int(
        one(
            conn,
            "SELECT codity.register_worker('live', %s, 5, 'h', 1, %s)",
            [queues, tenant.project_id],
        )
    )


def get(client: TestClient, user: User, path: str, **params: Any) -> Any:
    response = client.get(path, params=params, headers=user.headers)
    assert response.status_code == 200, response.text
    return response.json()["data"]


def overview(client: TestClient, user: User) -> dict[str, dict[str, Any]]:
    return {q["queue"]: q for q in get(client, user, "/api/v1/overview")["queues"]}


def per_minute(points: list[dict[str, Any]]) -> dict[dt.datetime, tuple[int, int]]:
    return {
        dt.datetime.fromisoformat(p["minute"]): (p["completed"], p["failed"])
        for p in points
        if p["completed"] or p["failed"]
    }


@pytest.fixture
def tenant(conn: Conn) -> Tenant:
    return make_tenant(conn)


@pytest.fixture
def viewer(conn: Conn, tenant: Tenant) -> User:
    return add_user(conn, tenant, Role.VIEWER)


# ---------------------------------------------------------------------------------------
# Throughput and history
# ---------------------------------------------------------------------------------------


def test_throughput_reads_closed_minutes_from_the_rollup_and_counts_only_the_rest_live(
    db_url: str, conn: Conn, tenant: Tenant, viewer: User
) -> None:
    queue(conn, tenant, "emails")
    this_minute = one(conn, "SELECT date_trunc('minute', now())")
    half_hour_ago = this_minute - 30 * MINUTE
    twenty_ago = this_minute - 20 * MINUTE
    gone = finish(conn, tenant, "emails", half_hour_ago + dt.timedelta(seconds=10), n=2)
    gone += finish(conn, tenant, "emails", half_hour_ago + dt.timedelta(seconds=20), fail=True)
    finish(conn, tenant, "emails", twenty_ago + dt.timedelta(seconds=5))
    assert one(conn, "SELECT codity.roll_up()") == 60
    # Break it first: these jobs and their executions are gone (an execution row references
    # its queue, not its job, since migration 0018); only the rollup remembers their minute.
    # An overview that ignored the rollup and counted every minute live from job_executions
    # would read 0 there, and this test fails.
    conn.execute("DELETE FROM codity.jobs WHERE id = ANY(%s)", [gone])
    conn.execute("DELETE FROM codity.job_executions WHERE job_id = ANY(%s)", [gone])
    finish(conn, tenant, "emails", n=3)  # now: after rolled_until, counted live
    live_minute = one(
        conn,
        "SELECT max(date_trunc('minute', finished_at)) FROM codity.job_executions x"
        " JOIN codity.queues q ON q.id = x.queue_id WHERE q.name = 'emails'",
    )

    with web_client(db_url) as client:
        emails = overview(client, viewer)["emails"]
        history = get(client, viewer, "/api/v1/queues/emails/history", minutes=60)

    assert len(emails["throughput"]) == 60
    minutes = [dt.datetime.fromisoformat(p["minute"]) for p in emails["throughput"]]
    assert all(b - a == MINUTE for a, b in itertools.pairwise(minutes))
    assert per_minute(emails["throughput"]) == {
        half_hour_ago: (2, 1),
        twenty_ago: (1, 0),  # once: rolled, and not counted live again
        live_minute: (3, 0),
    }
    rolled = {dt.datetime.fromisoformat(p["minute"]): p for p in history["points"]}
    assert rolled[half_hour_ago] | {"minute": None} == {
        "minute": None,
        "completed": 2,
        "failed": 1,
        "dead_lettered": 1,
        "claimable": 0,
        "scheduled": 0,
        "running": 0,
        "rolled": True,
    }
    rolled_until = dt.datetime.fromisoformat(history["rolled_until"])
    assert all(p["rolled"] == (m < rolled_until) for m, p in rolled.items())
    assert live_minute not in per_minute(history["points"]), "history is the rollup only"


def test_history_zero_fills_its_minutes_and_refuses_a_window_out_of_range(
    db_url: str, conn: Conn, tenant: Tenant, viewer: User
) -> None:
    queue_id = queue(conn, tenant, "emails")
    conn.execute(
        "INSERT INTO codity.queue_minutes (queue_id, project_id, minute, claimable, running)"
        " SELECT id, project_id, date_trunc('minute', now()) - interval '3 minutes', 7, 2"
        " FROM codity.queues WHERE id = %s",
        [queue_id],
    )
    conn.execute("UPDATE codity.rollup_state SET rolled_until = date_trunc('minute', now())")
    with web_client(db_url) as client:
        history = get(client, viewer, "/api/v1/queues/emails/history", minutes=5)
        default = get(client, viewer, "/api/v1/queues/emails/history")
        refused = {
            value: client.get(
                "/api/v1/queues/emails/history", params={"minutes": value}, headers=viewer.headers
            )
            for value in ("4", "1441", "an hour", "-5")
        }
    assert history["minutes"] == 5 and len(history["points"]) == 5
    assert [(p["claimable"], p["running"]) for p in history["points"]] == [
        (0, 0),
        (0, 0),
        (7, 2),
        (0, 0),
        (0, 0),
    ], "the last five closed minutes, the sampled one three minutes before this one"
    assert all(p["rolled"] for p in history["points"])
    assert len(default["points"]) == 60
    for value, response in refused.items():
        assert response.status_code == 422, value
        assert response.json()["error"]["details"][0]["location"] == ["query", "minutes"]


# ---------------------------------------------------------------------------------------
# Capped counts
# ---------------------------------------------------------------------------------------


def _load(conn: Conn, queue_id: int, n: int, status: str = "queued") -> None:
    """``n`` jobs inserted in one statement as the owner: fast, and enough to pass the cap."""
    conn.execute(
        "INSERT INTO codity.jobs (queue_id, project_id, task, status, run_at, max_attempts)"
        " SELECT q.id, q.project_id, 'bulk', %s::codity.job_status, now() - interval '1 minute', 1"
        " FROM codity.queues q, generate_series(1, %s) WHERE q.id = %s",
        [status, n, queue_id],
    )


def test_counts_stop_at_the_cap_and_say_which_did(
    db_url: str, conn: Conn, tenant: Tenant, viewer: User
) -> None:
    big = queue(conn, tenant, "big")
    queue(conn, tenant, "small")
    _load(conn, big, 10_001)
    _load(conn, big, 3, "scheduled")
    enqueue(conn, tenant, "small", 2)
    conn.execute(
        "INSERT INTO codity.dead_letters"
        " (queue_id, project_id, task, payload, reason, attempts, dead_at)"
        " SELECT q.id, q.project_id, 'bulk', '{}', 'max_attempts', 1, now() - interval '1 day'"
        " FROM codity.queues q, generate_series(1, 10001) WHERE q.id = %s",
        [big],
    )
    with web_client(db_url) as client:
        data = get(client, viewer, "/api/v1/overview")
        stats = get(client, viewer, "/api/v1/queues/big/stats")
        small = get(client, viewer, "/api/v1/queues/small/stats")
    # Break it first: with the cap removed these read 10,001 and nothing is marked capped.
    queues = {q["queue"]: q for q in data["queues"]}
    assert data["count_cap"] == 10_000
    assert (queues["big"]["claimable"], queues["big"]["capped"]) == (10_000, ["claimable"])
    assert queues["big"]["total"] == 10_003, "a sum of capped counts: at least"
    assert (data["totals"]["claimable"], data["totals"]["capped"]) == (10_002, ["claimable"])
    assert (data["dead_letters_unreplayed"], data["dead_letters_unreplayed_capped"]) == (
        10_000,
        True,
    )
    assert (stats["claimable"], stats["scheduled"], stats["capped"]) == (10_000, 3, ["claimable"])
    assert (stats["count_cap"], stats["name"]) == (10_000, "big")
    assert (small["claimable"], small["capped"]) == (2, [])


# ---------------------------------------------------------------------------------------
# Live workers and problems
# ---------------------------------------------------------------------------------------


def test_live_workers_are_those_serving_the_queue_by_name_or_by_serving_every_queue(
    db_url: str, conn: Conn, tenant: Tenant, viewer: User
) -> None:
    for name in ("emails", "reports", "idle"):
        queue(conn, tenant, name)
    live_worker(conn, tenant, ["emails"])
    live_worker(conn, tenant, [])  # no list: it claims from every queue of the project
    silent = live_worker(conn, tenant, ["reports"])
    conn.execute(
        "UPDATE codity.workers SET last_heartbeat_at = now() - interval '1 minute' WHERE id = %s",
        [silent],
    )
    conn.execute("SELECT codity.deregister_worker(%s)", [live_worker(conn, tenant, ["idle"])])
    other = make_tenant(conn)
    queue(conn, other, "emails")
    live_worker(conn, other, [])
    with web_client(db_url) as client:
        data = get(client, viewer, "/api/v1/overview")
    live = {q["queue"]: q["live_workers"] for q in data["queues"]}
    assert live == {"emails": 2, "idle": 1, "reports": 1}
    assert data["workers_alive"] == 2


def _codes(queues: dict[str, dict[str, Any]]) -> dict[str, list[str]]:
    return {name: [p["code"] for p in q["problems"]] for name, q in queues.items()}


def test_paused_and_unserved_queues_are_flagged(
    db_url: str, conn: Conn, tenant: Tenant, viewer: User
) -> None:
    for name in ("stuck", "served", "empty"):
        queue(conn, tenant, name)
    enqueue(conn, tenant, "stuck", 2)
    conn.execute("SELECT codity.pause_queue('stuck', %s)", [tenant.project_id])
    enqueue(conn, tenant, "served", 2)
    live_worker(conn, tenant, ["served"])
    with web_client(db_url) as client:
        queues = overview(client, viewer)
    assert _codes(queues) == {"stuck": ["paused", "no_live_worker"], "served": [], "empty": []}
    assert queues["stuck"]["problems"][1]["text"] == (
        "2 claimable, and no live worker serves this queue."
    )


def test_a_backlog_growing_faster_than_it_drains_is_flagged_while_the_rollup_is_current(
    db_url: str, conn: Conn, tenant: Tenant, viewer: User
) -> None:
    ids = {name: queue(conn, tenant, name) for name in ("growing", "draining", "shrinking")}
    finish(conn, tenant, "draining", n=6)  # six completed just now
    conn.execute("UPDATE codity.rollup_state SET rolled_until = date_trunc('minute', now())")
    # The depth samples roll_up took about five minutes ago (minute: rolled_until - 5).
    for name, claimable in (("growing", 2), ("draining", 2), ("shrinking", 9)):
        conn.execute(
            "INSERT INTO codity.queue_minutes (queue_id, project_id, minute, claimable)"
            " SELECT id, project_id, date_trunc('minute', now()) - interval '5 minutes', %s"
            " FROM codity.queues WHERE id = %s",
            [claimable, ids[name]],
        )
        enqueue(conn, tenant, name, 5)
    live_worker(conn, tenant, [])
    with web_client(db_url) as client:
        current = overview(client, viewer)
        conn.execute(
            "UPDATE codity.rollup_state SET rolled_until = date_trunc('minute', now())"
            " - interval '10 minutes'"
        )
        behind = overview(client, viewer)
    assert _codes(current) == {"growing": ["backlog_growing"], "draining": [], "shrinking": []}
    assert current["growing"]["problems"][0]["text"] == (
        "Claimable grew from 2 to 5 in about 5 minutes; 0 completed meanwhile."
    )
    assert _codes(behind)["growing"] == [], "no recent sample to compare with"


def test_dead_letters_rising_over_the_ten_minutes_before_are_flagged(
    db_url: str, conn: Conn, tenant: Tenant, viewer: User
) -> None:
    for name in ("dying", "steady"):
        queue(conn, tenant, name)
    finish(conn, tenant, "dying", fail=True)
    earlier = finish(conn, tenant, "steady", n=2, fail=True)
    conn.execute(
        "UPDATE codity.dead_letters SET dead_at = now() - interval '15 minutes'"
        " WHERE job_id = ANY(%s)",
        [earlier],
    )
    finish(conn, tenant, "steady", fail=True)
    live_worker(conn, tenant, [])
    with web_client(db_url) as client:
        queues = overview(client, viewer)
    assert _codes(queues) == {"dying": ["dead_letters_rising"], "steady": []}
    assert queues["dying"]["problems"][0]["text"] == (
        "1 dead-lettered in the last 10 minutes, 0 in the 10 before."
    )


def test_a_served_queue_nobody_claims_from_is_flagged_waiting_behind_another(
    db_url: str, conn: Conn, tenant: Tenant, viewer: User
) -> None:
    """Issue 26: claimable jobs, a live worker serving the queue, no pause or limit holding
    it, and no claim for over a minute: its workers are busy with other queues. Not when
    the jobs are new, when a claim was made lately, or when its own max_running holds it."""
    for name in ("starved", "fresh", "recent", "limited"):
        queue(conn, tenant, name)
    create_queue(conn, "limited", project_id=tenant.project_id, max_running=1)
    worker = live_worker(conn, tenant, [])
    long_ago = one(conn, "SELECT now() - interval '3 minutes'")
    lately = one(conn, "SELECT now() - interval '10 seconds'")
    for name in ("starved", "recent", "limited"):
        for _ in range(3):
            conn.execute(
                "SELECT codity.enqueue(%s, 't', p_project_id => %s, p_now => %s)",
                [name, tenant.project_id, long_ago],
            )
    enqueue(conn, tenant, "fresh", 3)
    for name, at in (("recent", lately), ("limited", long_ago)):
        conn.execute("SELECT * FROM codity.claim(%s, %s, 1, p_now => %s)", [worker, name, at])
    with web_client(db_url) as client:
        queues = overview(client, viewer)
    codes = _codes(queues)
    assert codes == {
        "starved": ["waiting_behind_another_queue"],
        "fresh": [],
        "recent": [],
        "limited": [],
    }, codes
    assert queues["starved"]["problems"][0]["text"].startswith(
        "3 claimable and 1 live worker(s) serve this queue, yet nothing was claimed"
    )
