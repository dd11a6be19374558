"""Workers over HTTP: liveness as the engine decides it, uptime that stops with the worker,
the jobs a worker holds and the jobs it gave back to the queue.

Workers live and die through the SQL API as the database's owner (register, claim, start,
heartbeat, sweep_workers, reap, release), with time moved by ``p_now`` to a scene that
started ten minutes ago, so the API, which reads at the real ``now()``, sees them as an
operator would afterwards. A stale worker is made by setting its last heartbeat back.
No sleeps.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from codity.web.access import Role
from tests.sqlapi import NO_BACKOFF, create_queue, one, row
from tests.webapp import Tenant, add_user, make_tenant, web_client

START = datetime.now(UTC) - timedelta(minutes=10)
"""The scene's clock starts here (register, claim, heartbeat); the API reads at now()."""


def at(minutes: float) -> datetime:
    """``minutes`` after the scene's start."""
    return START + timedelta(minutes=minutes)


def queue(conn: psycopg.Connection, tenant: Tenant, name: str = "emails") -> None:
    create_queue(conn, name, project_id=tenant.project_id, max_attempts=3, **NO_BACKOFF)


def register(
    conn: psycopg.Connection, tenant: Tenant, name: str, *, when: datetime | None = None
) -> int:
    return int(
        one(
            conn,
            "SELECT codity.register_worker(%s, ARRAY['emails'], 4, 'host-a', 4242, %s,"
            " p_now => coalesce(%s, now()))",
            [name, tenant.project_id, when],
        )
    )


def enqueue(conn: psycopg.Connection, tenant: Tenant) -> int:
    return int(
        one(
            conn,
            "SELECT job_id FROM codity.enqueue('emails', 'emails.send',"
            " p_project_id => %s, p_now => %s)",
            [tenant.project_id, START],
        )
    )


def hold(conn: psycopg.Connection, worker: int, *, when: datetime | None = None) -> tuple[int, int]:
    """The worker claims one job of emails and starts it: (job id, fence)."""
    job, fence = row(
        conn,
        "SELECT job_id, fence FROM codity.claim(%s, 'emails', 1, p_now => coalesce(%s, now()))",
        [worker, when],
    )
    conn.execute(
        "SELECT * FROM codity.start(%s, %s, p_now => coalesce(%s, now()))", [job, fence, when]
    )
    return int(job), int(fence)


def dead_worker_with_reaped_job(conn: psycopg.Connection, tenant: Tenant) -> tuple[int, int]:
    """A worker that started 10 min ago, took a job, heartbeated at +2 min and went silent;
    the sweeper declared it dead at +3 min and the reaper gave its job back to the queue,
    attempt refunded. Returns (worker id, job id)."""
    worker = register(conn, tenant, "doomed", when=at(0))
    job = enqueue(conn, tenant)
    _, fence = hold(conn, worker, when=at(1))
    conn.execute("SELECT * FROM codity.heartbeat(%s, %s, %s, %s)", [worker, [job], [fence], at(2)])
    swept = conn.execute("SELECT worker_id FROM codity.sweep_workers(%s)", [at(3)]).fetchall()
    assert (worker,) in swept
    reaped = conn.execute("SELECT job_id FROM codity.reap(%s)", [at(3)]).fetchall()
    assert [r[0] for r in reaped] == [job]
    return worker, job


def exact_uptime(conn: psycopg.Connection, worker: int, end: str) -> float:
    """``end`` (a column of the worker) minus its start, in seconds, as the database says."""
    return float(
        one(
            conn,
            f"SELECT extract(epoch FROM {end} - started_at)::float8"
            " FROM codity.workers WHERE id = %s",
            [worker],
        )
    )


@pytest.fixture
def tenant(conn: psycopg.Connection) -> Tenant:
    made = make_tenant(conn)
    queue(conn, made)
    return made


def _workers(client: Any, user: Any, **params: Any) -> dict[str, dict[str, Any]]:
    answer = client.get("/api/v1/workers", params=params, headers=user.headers)
    assert answer.status_code == 200, answer.text
    return {w["name"]: w for w in answer.json()["data"]}


def test_liveness_follows_the_sweepers_rule_and_uptime_stops_with_the_worker(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    viewer = add_user(conn, tenant, Role.VIEWER)
    alive = register(conn, tenant, "alive", when=at(-50))
    conn.execute("SELECT * FROM codity.heartbeat(%s)", [alive])
    stale = register(conn, tenant, "stale", when=at(-50))
    # Silent for 12 s: two 5-second heartbeats missed, the 15-second threshold not reached.
    conn.execute(
        "UPDATE codity.workers SET last_heartbeat_at = now() - interval '12 seconds' WHERE id = %s",
        [stale],
    )
    silent = register(conn, tenant, "silent", when=at(-50))
    conn.execute(
        "UPDATE codity.workers SET last_heartbeat_at = now() - interval '20 seconds' WHERE id = %s",
        [silent],
    )
    dead, _ = dead_worker_with_reaped_job(conn, tenant)
    stopped = register(conn, tenant, "stopped", when=at(0))
    conn.execute("SELECT codity.deregister_worker(%s, %s)", [stopped, at(4)])

    with web_client(db_url) as client:
        first = _workers(client, viewer)
        second = _workers(client, viewer)
        live = _workers(client, viewer, live="true")
        gone = _workers(client, viewer, live="false")

    liveness = {name: w["liveness"] for name, w in first.items()}
    assert liveness == {
        "alive": "alive",
        "stale": "stale",
        "silent": "dead",  # still active: the next sweep will declare it dead
        "doomed": "dead",
        "stopped": "stopped",
    }
    assert {n: w["is_alive"] for n, w in first.items()} == {
        "alive": True,
        "stale": True,
        "silent": False,
        "doomed": False,
        "stopped": False,
    }
    assert first["silent"]["status"] == "active" and first["doomed"]["status"] == "dead"
    # Frozen: exactly up to the last heartbeat (stale, dead) or to the stop (stopped), and
    # the same on every read. A live worker's uptime runs to now().
    assert first["stale"]["uptime_seconds"] == exact_uptime(conn, stale, "last_heartbeat_at")
    assert first["silent"]["uptime_seconds"] == exact_uptime(conn, silent, "last_heartbeat_at")
    assert first["doomed"]["uptime_seconds"] == exact_uptime(conn, dead, "last_heartbeat_at")
    assert first["doomed"]["uptime_seconds"] == 120.0
    assert first["stopped"]["uptime_seconds"] == exact_uptime(conn, stopped, "stopped_at") == 240.0
    for name in ("stale", "silent", "doomed", "stopped"):
        assert second[name]["uptime_seconds"] == first[name]["uptime_seconds"], name
    assert first["alive"]["uptime_seconds"] >= 3600
    assert second["alive"]["uptime_seconds"] > first["alive"]["uptime_seconds"]
    assert first["stale"]["heartbeat_age_seconds"] >= 12
    assert first["alive"]["heartbeat_seconds"] == 5.0
    assert set(live) == {"alive", "stale"}
    assert set(gone) == {"silent", "doomed", "stopped"}


def test_the_dead_worker_threshold_is_the_installations_setting(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    """Not a constant: with worker_dead_after raised to a minute, 20 s of silence is stale."""
    viewer = add_user(conn, tenant, Role.VIEWER)
    quiet = register(conn, tenant, "quiet")
    conn.execute(
        "UPDATE codity.workers SET last_heartbeat_at = now() - interval '20 seconds' WHERE id = %s",
        [quiet],
    )
    with web_client(db_url) as client:
        before = _workers(client, viewer)["quiet"]["liveness"]
        conn.execute("SELECT * FROM codity.configure(interval '1 minute')")
        after = _workers(client, viewer)["quiet"]["liveness"]
    assert (before, after) == ("dead", "stale")


def test_jobs_held_counts_the_claimed_and_running_jobs_of_each_worker(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    viewer = add_user(conn, tenant, Role.VIEWER)
    busy = register(conn, tenant, "busy")
    idle = register(conn, tenant, "idle")
    for _ in range(3):
        enqueue(conn, tenant)
    running, _ = hold(conn, busy)
    claimed = int(one(conn, "SELECT job_id FROM codity.claim(%s, 'emails', 1)", [busy]))
    done, fence = hold(conn, busy)
    conn.execute("SELECT * FROM codity.complete(%s, %s)", [done, fence])

    with web_client(db_url) as client:
        listed = _workers(client, viewer)
        detail = client.get(f"/api/v1/workers/{busy}", headers=viewer.headers).json()["data"]
    assert (listed["busy"]["jobs_held"], listed["idle"]["jobs_held"]) == (2, 0)
    assert not listed["busy"]["jobs_held_capped"]
    assert [(j["id"], j["status"]) for j in detail["held_jobs"]] == [
        (running, "running"),
        (claimed, "claimed"),
    ]
    assert all(j["queue"] == "emails" and j["lock_expires_at"] for j in detail["held_jobs"])
    assert detail["returned_jobs"] == [] and idle


def test_a_dead_workers_detail_lists_its_jobs_returned_with_the_attempt_refunded(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    viewer = add_user(conn, tenant, Role.VIEWER)
    dead, job = dead_worker_with_reaped_job(conn, tenant)
    assert one(conn, "SELECT attempt FROM codity.jobs WHERE id = %s", [job]) == 0

    with web_client(db_url) as client:
        before = client.get(f"/api/v1/workers/{dead}", headers=viewer.headers)
        rescuer = register(conn, tenant, "rescuer")
        hold(conn, rescuer)
        after = client.get(f"/api/v1/workers/{dead}", headers=viewer.headers).json()["data"]
    assert before.status_code == 200, before.text
    data = before.json()["data"]
    assert data["liveness"] == "dead" and data["held_jobs"] == [] and data["jobs_held"] == 0
    (returned,) = data["returned_jobs"]
    assert returned | {"claimed_at": None, "finished_at": None} == {
        "job_id": job,
        "queue": "emails",
        "task": "emails.send",
        "execution_seq": 1,
        "attempt": 1,
        "status": "reaped",
        "claimed_at": None,
        "finished_at": None,
        "job_status": "queued",
    }
    # The job's state now, not then: another worker has it.
    assert after["returned_jobs"][0]["job_status"] == "running"


def test_a_drained_workers_released_jobs_are_listed_newest_first(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    viewer = add_user(conn, tenant, Role.VIEWER)
    worker = register(conn, tenant, "drainer", when=at(0))
    first, second = enqueue(conn, tenant), enqueue(conn, tenant)
    _, fence_1 = hold(conn, worker, when=at(1))
    _, fence_2 = hold(conn, worker, when=at(2))
    conn.execute("SELECT * FROM codity.release(%s, %s, %s)", [first, fence_1, at(3)])
    conn.execute("SELECT * FROM codity.release(%s, %s, %s)", [second, fence_2, at(3)])
    conn.execute("SELECT codity.deregister_worker(%s, %s)", [worker, at(3)])

    with web_client(db_url) as client:
        data = client.get(f"/api/v1/workers/{worker}", headers=viewer.headers).json()["data"]
    assert data["liveness"] == "stopped"
    assert [(r["job_id"], r["status"]) for r in data["returned_jobs"]] == [
        (second, "released"),
        (first, "released"),
    ]


def test_another_projects_worker_answers_exactly_like_a_missing_one(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    viewer = add_user(conn, tenant, Role.VIEWER)
    other = make_tenant(conn)
    queue(conn, other)
    foreign = register(conn, other, "foreign")
    with web_client(db_url) as client:
        answers = [
            client.get(f"/api/v1/workers/{worker_id}", headers=viewer.headers)
            for worker_id in (foreign, 8_999_999_999, 2**63)
        ]
    bodies = []
    for answer in answers:
        assert answer.status_code == 404, answer.text
        body = answer.json()
        body["error"].pop("request_id")
        bodies.append(body)
    assert bodies[0] == bodies[1] == bodies[2]
    assert bodies[0]["error"]["message"] == "worker not found"
