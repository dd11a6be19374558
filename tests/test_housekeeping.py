"""Housekeeping: codity.prune_housekeeping keeps the tables outside the queues bounded.

Workers long gone, long-expired refresh tokens and fence rejections past their period are
deleted, and nothing else: an active worker, a recent one, a dead worker that still holds a
job, a token that expired lately, a rotated token whose family is still live, and a recent
fence rejection all stay; a deleted rejection is counted into codity.fence_rejection_totals,
so /metrics' total never falls. Time moves through ``p_now``. A locked row is passed over
without waiting, and the scheduler calls it by itself.
"""

from __future__ import annotations

import signal
import uuid
from datetime import datetime
from pathlib import Path

import psycopg
import pytest

from codity.web.access import Role
from tests.processes import Processes, wait_until
from tests.test_lifecycle import Api, at
from tests.webapp import add_user, make_tenant

DAY = 86400.0


@pytest.fixture
def api(tx: psycopg.Connection) -> Api:
    return Api(tx)


def _housekeep(api: Api, now_s: float, limit: int = 1000) -> tuple[int, int]:
    """Workers and refresh tokens deleted (fence rejections: :func:`_rejections_pruned`)."""
    found = api.row("SELECT * FROM codity.prune_housekeeping(%s, %s)", [at(now_s), limit])
    return int(found[0]), int(found[1])


def _rejections_pruned(api: Api, now_s: float, limit: int = 1000) -> int:
    found = api.row("SELECT * FROM codity.prune_housekeeping(%s, %s)", [at(now_s), limit])
    return int(found[2])


def _workers(api: Api) -> set[int]:
    return {r[0] for r in api.conn.execute("SELECT id FROM codity.workers").fetchall()}


def test_workers_go_7_days_after_they_stopped_unless_they_hold_a_job(api: Api) -> None:
    api.queue("hk")
    active = api.worker("active", now=at(0))
    stopped = api.worker("stopped", now=at(0))
    api.value("SELECT codity.deregister_worker(%s, %s)", [stopped, at(0)])
    recent = api.worker("recent", now=at(0))
    api.value("SELECT codity.deregister_worker(%s, %s)", [recent, at(DAY)])
    dead = api.worker("dead", now=at(0))
    holder = api.worker("holder", now=at(0))
    api.enqueue("hk", now=at(0))
    api.start(api.claim_one(holder, "hk", now=at(0)), now=at(0))
    # Only the active worker heartbeats on; the others are declared dead at 60 s, and the
    # holder's job is not reaped (no reap ran), so it still holds it.
    api.conn.execute("SELECT codity.heartbeat(%s, '{}', '{}', %s)", [active, at(7 * DAY + 50)])
    swept = api.conn.execute("SELECT worker_id FROM codity.sweep_workers(%s)", [at(60)])
    assert {r[0] for r in swept.fetchall()} == {dead, holder}

    assert _housekeep(api, 7 * DAY - 1) == (0, 0)  # nobody gone for 7 days yet
    assert _housekeep(api, 7 * DAY + 61) == (2, 0)
    assert _workers(api) == {active, recent, holder}
    assert api.status(api.value("SELECT id FROM codity.jobs WHERE worker_id = %s", [holder])) in (
        "claimed",
        "running",
    )
    assert _housekeep(api, 8 * DAY + 1) == (1, 0)  # the one stopped a day later
    assert _workers(api) == {active, holder}


def _reject(api: Api, project: int | None, queue: int | None, at_s: float) -> None:
    api.conn.execute(
        "INSERT INTO codity.fence_rejections (job_id, queue_id, project_id, call,"
        " presented_fence, rejected_at) VALUES (1, %s, %s, 'complete', 1, %s)",
        [queue, project, at(at_s)],
    )


def _counted(api: Api) -> dict[tuple[int | None, int | None], int]:
    """What /metrics adds up per (project, queue): the rows left plus the totals."""
    rows = api.conn.execute(
        "SELECT project_id, queue_id, sum(n)::int FROM ("
        " SELECT project_id, queue_id, count(*) AS n FROM codity.fence_rejections"
        "  GROUP BY 1, 2"
        " UNION ALL SELECT project_id, queue_id, rejections FROM codity.fence_rejection_totals"
        ") r GROUP BY 1, 2"
    ).fetchall()
    return {(p, q): n for p, q, n in rows}


def test_fence_rejections_go_after_30_days_and_the_count_never_falls(api: Api) -> None:
    """/metrics reports codity_fence_rejections_total as the rows plus what was pruned: a
    Prometheus counter must never fall. Break it: delete without adding to the totals — the
    count drops from 4 to 1 for the queue."""
    queue = api.queue("hk")
    project = api.value("SELECT project_id FROM codity.queues WHERE id = %s", [queue])
    for at_s in (0, DAY, 2 * DAY, 40 * DAY):
        _reject(api, project, queue, at_s)
    _reject(api, None, None, 0)  # about a job that never existed: no queue, no project
    before = _counted(api)
    assert before == {(project, queue): 4, (None, None): 1}
    assert _rejections_pruned(api, 30 * DAY) == 0  # none older than 30 days yet
    assert _rejections_pruned(api, 33 * DAY, limit=2) == 2  # the two oldest
    assert _counted(api) == before
    assert _rejections_pruned(api, 33 * DAY, limit=2) == 2
    assert _rejections_pruned(api, 33 * DAY) == 0
    assert api.value("SELECT count(*) FROM codity.fence_rejections") == 1  # day 40's
    assert _counted(api) == before
    assert api.conn.execute(
        "SELECT project_id, queue_id, rejections FROM codity.fence_rejection_totals"
        " ORDER BY project_id NULLS FIRST"
    ).fetchall() == [(None, None, 1), (project, queue, 3)]


def _token(
    api: Api,
    user_id: int,
    expires: datetime,
    family: uuid.UUID | None = None,
    revoked: bool = False,
) -> None:
    api.conn.execute(
        "INSERT INTO codity.refresh_tokens (user_id, family_id, token_hash, issued_at, "
        "expires_at, revoked_at) VALUES (%s, %s, %s, %s, %s, %s)",
        [
            user_id,
            family or uuid.uuid4(),
            uuid.uuid4().bytes,
            at(-30 * DAY),
            expires,
            at(-DAY) if revoked else None,
        ],
    )


def test_refresh_tokens_go_a_day_after_they_expired(api: Api) -> None:
    user = add_user(api.conn, make_tenant(api.conn), Role.MEMBER)
    _token(api, user.user_id, at(0))
    _token(api, user.user_id, at(DAY))
    _token(api, user.user_id, at(30 * DAY))  # not expired yet
    assert _housekeep(api, DAY) == (0, 0)
    assert _housekeep(api, DAY + 1) == (0, 1)
    assert _housekeep(api, 2 * DAY + 1) == (0, 1)
    assert api.value("SELECT count(*) FROM codity.refresh_tokens") == 1


def test_each_call_deletes_at_most_its_limit_oldest_first(api: Api) -> None:
    user = add_user(api.conn, make_tenant(api.conn), Role.MEMBER)
    for days in (3, 1, 2):
        _token(api, user.user_id, at(days * DAY))
    assert _housekeep(api, 60 * DAY, limit=2) == (0, 2)
    left = api.conn.execute("SELECT expires_at FROM codity.refresh_tokens").fetchall()
    assert left == [(at(3 * DAY),)]
    assert _housekeep(api, 60 * DAY, limit=2) == (0, 1)
    assert _housekeep(api, 60 * DAY, limit=2) == (0, 0)


def test_a_locked_worker_row_is_passed_over_without_waiting(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn, psycopg.connect(db_url) as holder:
        conn.execute("SELECT codity.create_queue('hk')")
        old = conn.execute("SELECT codity.register_worker('old', ARRAY['hk'])").fetchone()
        other = conn.execute("SELECT codity.register_worker('other', ARRAY['hk'])").fetchone()
        assert old is not None and other is not None
        for worker in (old[0], other[0]):
            conn.execute("SELECT codity.deregister_worker(%s)", [worker])
        # A heartbeat or a deregistration of the same row holds it: housekeeping skips it.
        holder.execute("SELECT 1 FROM codity.workers WHERE id = %s FOR UPDATE", [old[0]])
        conn.execute("SET lock_timeout = '2s'")
        found = conn.execute(
            "SELECT * FROM codity.prune_housekeeping(now() + interval '8 days')"
        ).fetchone()
        assert found == (1, 0, 0)
        holder.rollback()
        found = conn.execute(
            "SELECT * FROM codity.prune_housekeeping(now() + interval '8 days')"
        ).fetchone()
        assert found == (1, 0, 0)


def test_the_scheduler_housekeeps_at_its_first_tick(tmp_path: Path, db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT codity.create_queue('hk')")
        gone = conn.execute("SELECT codity.register_worker('gone', ARRAY['hk'])").fetchone()
        assert gone is not None
        conn.execute("SELECT codity.deregister_worker(%s)", [gone[0]])
        conn.execute(
            "UPDATE codity.workers SET stopped_at = now() - interval '8 days' WHERE id = %s",
            [gone[0]],
        )
        with Processes(tmp_path, db_url, CODITY_LOG_FORMAT="text") as procs:
            scheduler = procs.scheduler()
            wait_until(
                lambda: (
                    conn.execute(
                        "SELECT NOT EXISTS (SELECT FROM codity.workers WHERE id = %s)", [gone[0]]
                    ).fetchone()
                    == (True,)
                ),
                timeout=30,
                what="the scheduler deletes the worker gone for 8 days",
                alive=[scheduler],
            )
            wait_until(
                lambda: scheduler.logged(
                    "pruned 1 old workers, 0 refresh tokens, 0 fence rejections"
                ),
                timeout=10,
                what="the scheduler says so",
            )
            scheduler.send(signal.SIGTERM)
            assert scheduler.wait(timeout=30) == 0


def test_a_rotated_token_stays_while_its_family_can_still_be_refreshed(api: Api) -> None:
    """Presented again, a rotated token revokes its family (the refresh tests): deleting it
    while the family's newest token is live would let a thief's chain run on unnoticed."""
    user = add_user(api.conn, make_tenant(api.conn), Role.MEMBER)
    live, revoked = uuid.uuid4(), uuid.uuid4()
    _token(api, user.user_id, at(0), family=live)  # rotated long ago
    _token(api, user.user_id, at(20 * DAY), family=live)  # its successor, live
    _token(api, user.user_id, at(0), family=revoked, revoked=True)
    _token(api, user.user_id, at(20 * DAY), family=revoked, revoked=True)  # revoked: dead
    assert _housekeep(api, 10 * DAY) == (0, 1)  # the revoked family's expired token
    assert api.value("SELECT count(*) FROM codity.refresh_tokens WHERE family_id = %s", [live]) == 2
    assert _housekeep(api, 21 * DAY + 1) == (0, 3)  # the live family has expired too
