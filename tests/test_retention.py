"""Retention: codity.prune deletes what each queue no longer keeps, and nothing else.

Time moves through ``p_now``. Each guarantee here fails when its mechanism is taken out:
the periods (a job is kept until its queue's period has passed), the roll-up guard (nothing
the per-minute figures have not counted), SKIP LOCKED (a locked row is passed over, nobody
waits), the per-call limit, and the scheduler's loop that works a backlog off.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from codity.scheduler import PRUNE_LIMIT, prune
from codity.web.access import Role
from tests.sqlapi import NO_BACKOFF, create_queue, one, row
from tests.test_lifecycle import Api, at
from tests.webapp import add_user, make_tenant, web_client

DAY = 86400.0


@pytest.fixture
def api(tx: psycopg.Connection) -> Api:
    """The SQL API in a transaction rolled back at the end."""
    return Api(tx)


def _prune(api: Api, now_s: float, limit: int = 1000) -> tuple[int, int, int]:
    """Roll the minutes up to ``now_s`` (what prune waits for), then prune once."""
    while api.value("SELECT codity.roll_up(%s)", [at(now_s)]):  # an hour per call
        pass
    found = api.row("SELECT * FROM codity.prune(%s, %s)", [at(now_s), limit])
    return int(found[0]), int(found[1]), int(found[2])


def _queue(api: Api, name: str, **keep: Any) -> None:
    """A queue with these periods whose retries are due at once (``_finished`` retries)."""
    api.queue(name, **NO_BACKOFF, **keep)


def _finished(api: Api, queue: str, how: str, now_s: float = 0) -> int:
    """A job of ``queue`` that finished at ``now_s`` by ``how``: completed after a failed
    attempt (two executions), cancelled while queued, or dead-lettered."""
    worker = api.worker(now=at(now_s))
    job = api.enqueue(queue, now=at(now_s))
    if how == "cancelled":
        api.cancel(job, now=at(now_s))
        return job
    claimed = api.claim_one(worker, queue, now=at(now_s))
    api.start(claimed, now=at(now_s))
    if how == "dead_letter":
        api.fail(claimed, "fatal", retryable=False, now=at(now_s))
        return job
    api.fail(claimed, "flaky", now=at(now_s))
    api.promote(at(now_s))  # failed -> queued: the retry is due at once
    retry = api.claim_one(worker, queue, now=at(now_s))
    api.start(retry, now=at(now_s))
    api.complete(retry, now=at(now_s))
    return job


def _exists(api: Api, table: str, job: int) -> bool:
    column = "id" if table == "jobs" else "job_id"
    return bool(api.value(f"SELECT EXISTS (SELECT FROM codity.{table} WHERE {column} = %s)", [job]))


def test_each_kind_of_finished_job_goes_after_its_own_period(api: Api) -> None:
    _queue(api, "kept")
    completed = _finished(api, "kept", "completed")
    cancelled = _finished(api, "kept", "cancelled")
    dead = _finished(api, "kept", "dead_letter")
    assert (
        api.value("SELECT count(*) FROM codity.job_executions WHERE job_id = %s", [completed]) == 2
    )
    alive = api.enqueue("kept", now=at(0))  # queued: never pruned, however old

    assert _prune(api, 7 * DAY - 60) == (0, 0, 0)  # 7 days (the default) not yet over
    assert _prune(api, 7 * DAY + 120) == (2, 2, 0)  # completed (2 executions) and cancelled
    assert not _exists(api, "jobs", completed) and not _exists(api, "job_executions", completed)
    assert not _exists(api, "jobs", cancelled)
    assert _exists(api, "jobs", dead) and _exists(api, "dead_letters", dead)

    assert _prune(api, 30 * DAY + 120) == (1, 1, 1)  # dead letters: 30 days by default
    assert not _exists(api, "jobs", dead) and not _exists(api, "dead_letters", dead)
    assert not _exists(api, "job_executions", dead)
    assert api.status(alive) == "queued"


def test_a_queue_that_keeps_forever_is_never_pruned(api: Api) -> None:
    _queue(api, "forever", keep_completed_seconds=0, keep_dead_letters_seconds=0)
    assert api.row(
        "SELECT keep_completed_seconds, keep_dead_letters_seconds FROM codity.queues"
        " WHERE name = 'forever'"
    ) == (None, None)
    completed = _finished(api, "forever", "completed")
    dead = _finished(api, "forever", "dead_letter")
    assert _prune(api, 3650 * DAY) == (0, 0, 0)
    assert _exists(api, "jobs", completed) and _exists(api, "dead_letters", dead)


def test_nothing_the_roll_up_has_not_counted_is_pruned(api: Api) -> None:
    _queue(api, "fast", keep_completed_seconds=60)
    job = _finished(api, "fast", "completed")
    api.value("SELECT codity.roll_up(%s)", [at(-3600)])  # the roll-up stopped an hour ago
    assert api.row("SELECT * FROM codity.prune(%s)", [at(600)]) == (0, 0, 0)
    assert _exists(api, "jobs", job)
    assert _prune(api, 600) == (1, 2, 0)  # once the minutes are rolled up


def test_a_call_deletes_at_most_its_limit_per_queue_oldest_first(api: Api) -> None:
    api.queue("batch", keep_completed_seconds=60)
    worker = api.worker()
    jobs = [api.enqueue("batch") for _ in range(5)]
    for n, _ in enumerate(jobs):  # finish one a minute, oldest first
        claimed = api.claim_one(worker, "batch", now=at(60 * n))
        api.start(claimed, now=at(60 * n))
        api.complete(claimed, now=at(60 * n))
    finished_order = [
        int(r[0])
        for r in api.conn.execute(
            "SELECT id FROM codity.jobs WHERE id = ANY (%s) ORDER BY finished_at", [jobs]
        )
    ]
    assert _prune(api, 3600, limit=2) == (2, 2, 0)
    left = [j for j in finished_order if _exists(api, "jobs", j)]
    assert left == finished_order[2:]
    assert _prune(api, 3600, limit=2) == (2, 2, 0)
    assert _prune(api, 3600, limit=2) == (1, 1, 0)
    assert _prune(api, 3600, limit=2) == (0, 0, 0)


@pytest.mark.parametrize("limit", [0, -1, 100001, None])
def test_a_limit_out_of_range_is_refused(api: Api, limit: Any) -> None:
    with pytest.raises(psycopg.Error) as caught, api.conn.transaction():
        api.conn.execute("SELECT * FROM codity.prune(p_limit => %s)", [limit])
    assert caught.value.sqlstate == "CD010"
    assert "p_limit must be from 1 to 100000" in str(caught.value)


@pytest.mark.parametrize(
    ("setting", "value"),
    [("keep_completed_seconds", 59), ("keep_dead_letters_seconds", 315360001),
     ("keep_completed_seconds", -5)],
)  # fmt: skip
def test_a_period_out_of_range_is_refused_and_changes_nothing(
    api: Api, setting: str, value: int
) -> None:
    api.queue("strict", keep_completed_seconds=3600)
    with pytest.raises(psycopg.Error) as caught, api.conn.transaction():
        create_queue(api.conn, "strict", **{setting: value})
    assert caught.value.sqlstate == "CD010"
    assert f"{setting} must be from 60 to 315360000" in str(caught.value)
    assert api.row(
        "SELECT keep_completed_seconds, keep_dead_letters_seconds FROM codity.queues"
        " WHERE name = 'strict'"
    ) == (3600, 2592000)


def test_a_setting_left_out_keeps_its_value(api: Api) -> None:
    api.queue("tuned", keep_completed_seconds=120, keep_dead_letters_seconds=240)
    api.queue("tuned", max_attempts=7)
    assert api.row(
        "SELECT keep_completed_seconds, keep_dead_letters_seconds FROM codity.queues"
        " WHERE name = 'tuned'"
    ) == (120, 240)


def test_an_idempotency_key_is_remembered_while_its_job_is_kept(api: Api) -> None:
    api.queue("keys", keep_completed_seconds=60)
    worker = api.worker()
    enqueue = (
        "SELECT job_id, is_new FROM codity.enqueue('keys', 't', p_idempotency_key => 'k',"
        " p_now => %s)"
    )
    job, is_new = api.row(enqueue, [at(0)])
    assert is_new
    claimed = api.claim_one(worker, "keys")
    api.start(claimed)
    api.complete(claimed)
    assert api.row(enqueue, [at(30)]) == (job, False)
    assert _prune(api, 600) == (1, 1, 0)
    again, is_new = api.row(enqueue, [at(600)])
    assert again != job and is_new


def test_prune_passes_over_a_locked_job_without_waiting(db_url: str) -> None:
    """A finished job another session holds (a retry in progress) is left for later, and
    the prune does not wait for it: without SKIP LOCKED this fails on the lock timeout."""
    with psycopg.connect(db_url, autocommit=True) as conn, psycopg.connect(db_url) as holder:
        api = Api(conn)
        _queue(api, "busy", keep_completed_seconds=60)
        jobs = [_finished(api, "busy", "completed") for _ in range(3)]
        holder.execute("SELECT 1 FROM codity.jobs WHERE id = %s FOR UPDATE", [jobs[0]])
        conn.execute("SET lock_timeout = '2s'")
        assert _prune(api, 600) == (2, 4, 0)
        assert [_exists(api, "jobs", j) for j in jobs] == [True, False, False]
        holder.rollback()
        assert _prune(api, 600) == (1, 2, 0)


def test_claims_and_completions_do_not_wait_for_a_prune(db_url: str) -> None:
    """A prune's transaction left open holds the finished rows it deletes; workers claim and
    complete other jobs of the same queue meanwhile, each under a short lock timeout."""
    with psycopg.connect(db_url, autocommit=True) as conn, psycopg.connect(db_url) as pruner:
        api = Api(conn)
        _queue(api, "live", keep_completed_seconds=60)
        for _ in range(20):
            _finished(api, "live", "completed")
        fresh = [api.enqueue("live", now=at(600)) for _ in range(5)]
        api.value("SELECT codity.roll_up(%s)", [at(600)])
        assert row(pruner, "SELECT jobs FROM codity.prune(%s)", [at(600)]) == (20,)  # not committed
        conn.execute("SET lock_timeout = '1s'")
        worker = api.worker(now=at(600))
        claimed = api.claim(worker, "live", 5, now=at(600))
        assert sorted(c.job_id for c in claimed) == sorted(fresh)
        for c in claimed:
            api.start(c, now=at(600))
            api.complete(c, now=at(600))
        pruner.commit()
        assert [api.status(j) for j in fresh] == ["completed"] * 5
        assert one(conn, "SELECT count(*) FROM codity.jobs") == 5


def test_the_scheduler_loop_works_a_backlog_off_in_calls_of_its_limit(db_url: str) -> None:
    jobs = PRUNE_LIMIT + 37
    with psycopg.connect(db_url, autocommit=True) as conn:
        create_queue(conn, "backlog", keep_completed_seconds=60)
        conn.execute(
            "INSERT INTO codity.jobs (queue_id, project_id, task, status, run_at, max_attempts,"
            " finished_at, created_at, updated_at)"
            " SELECT q.id, q.project_id, 't', 'completed', now() - interval '1 day', 3,"
            "        now() - interval '1 day', now() - interval '1 day', now() - interval '1 day'"
            " FROM codity.queues q, generate_series(1, %s) WHERE q.name = 'backlog'",
            [jobs],
        )
        conn.execute("SELECT codity.roll_up()")
        # With no time to spend, one call: its limit, no more.
        assert prune(conn, budget_s=0) == (PRUNE_LIMIT, 0, 0)
        assert prune(conn, budget_s=60) == (37, 0, 0)
        assert one(conn, "SELECT count(*) FROM codity.jobs") == 0
        assert prune(conn, budget_s=60) == (0, 0, 0)


def test_the_period_is_measured_from_the_finish_not_the_enqueue(api: Api) -> None:
    api.queue("late", keep_completed_seconds=3600)
    worker = api.worker()
    job = api.enqueue("late", now=at(0))
    claimed = api.claim_one(worker, "late", now=at(5 * DAY))
    api.start(claimed, now=at(5 * DAY))
    api.complete(claimed, now=at(5 * DAY))
    assert _prune(api, 5 * DAY + 1800) == (0, 0, 0)
    assert _exists(api, "jobs", job)
    assert _prune(api, 5 * DAY + 3600 + 120) == (1, 1, 0)


def test_the_api_sets_reads_and_validates_the_periods(
    db_url: str, conn: psycopg.Connection
) -> None:
    admin = add_user(conn, make_tenant(conn), Role.ADMIN)
    h = admin.headers
    with web_client(db_url) as client:
        created = client.post("/api/v1/queues", headers=h, json={"name": "audit"})
        assert created.status_code == 201, created.text
        body = created.json()["data"]
        assert (body["keep_completed_seconds"], body["keep_dead_letters_seconds"]) == (
            604_800,
            2_592_000,
        )
        changed = client.patch(
            "/api/v1/queues/audit", headers=h, json={"keep_completed_seconds": None}
        )
        assert changed.status_code == 200, changed.text
        assert changed.json()["data"]["keep_completed_seconds"] is None  # forever
        assert changed.json()["data"]["keep_dead_letters_seconds"] == 2_592_000
        other = client.patch("/api/v1/queues/audit", headers=h, json={"max_attempts": 4})
        assert other.json()["data"]["keep_completed_seconds"] is None  # left as it was
        for bad in ({"keep_completed_seconds": 59}, {"keep_dead_letters_seconds": 10**9},
                    {"keep_completed_seconds": "a week"}):  # fmt: skip
            refused = client.patch("/api/v1/queues/audit", headers=h, json=bad)
            assert refused.status_code == 422, refused.text
            assert refused.json()["error"]["code"] == "validation_failed"
        forever = client.post(
            "/api/v1/queues", headers=h,
            json={"name": "forever", "keep_completed_seconds": None,
                  "keep_dead_letters_seconds": 3600},
        )  # fmt: skip
        assert forever.status_code == 201, forever.text
    assert row(
        conn,
        "SELECT keep_completed_seconds, keep_dead_letters_seconds FROM codity.queues"
        " WHERE name = 'audit'",
    ) == (None, 2_592_000)
    assert row(
        conn,
        "SELECT keep_completed_seconds, keep_dead_letters_seconds FROM codity.queues"
        " WHERE name = 'forever'",
    ) == (None, 3600)
