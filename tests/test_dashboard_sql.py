"""What the dashboard reads from SQL: capped depths per queue and the per-minute rollup.

``codity.queue_depths`` counts each state only up to a cap and finds the oldest claimable
job through the indexes; ``codity.roll_up`` closes each minute once into
``codity.queue_minutes``, and of several callers exactly one does it.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.sqlapi import NO_BACKOFF, Conn, create_queue, make_project, one, row

DEPTHS = (
    "SELECT claimable, scheduled, running, completed, failed, dead_letter, cancelled,"
    " oldest_claimable_at FROM codity.queue_depths(NULL, %s) WHERE queue = %s"
)


def _enqueue(conn: Conn, queue: str, *, priority: int = 0, run_at: Any = None) -> int:
    return int(
        one(
            conn,
            "SELECT job_id FROM codity.enqueue(%s, 't', p_priority => %s, p_run_at => %s)",
            [queue, priority, run_at],
        )
    )


def test_depths_count_each_state_up_to_the_cap_and_find_the_oldest_claimable(tx: Conn) -> None:
    create_queue(tx, "emails")
    now = one(tx, "SELECT now()")
    waiting = {
        _enqueue(tx, "emails", priority=5): dt.timedelta(minutes=1),
        _enqueue(tx, "emails", priority=0): dt.timedelta(minutes=2),
        _enqueue(tx, "emails", priority=-3): dt.timedelta(minutes=10),
        _enqueue(tx, "emails", priority=-3): dt.timedelta(minutes=4),
    }
    for job, age in waiting.items():
        tx.execute("UPDATE codity.jobs SET run_at = %s WHERE id = %s", [now - age, job])
    later = _enqueue(tx, "emails", priority=-9, run_at=now + dt.timedelta(hours=1))
    (worker,) = row(tx, "SELECT codity.register_worker('w', ARRAY['emails'])")
    held, _ = row(tx, "SELECT job_id, fence FROM codity.claim(%s, 'emails', 1)", [worker])
    assert held in waiting and waiting.pop(held) == dt.timedelta(minutes=1)

    assert row(tx, DEPTHS, [None, "emails"]) == (
        3,
        1,
        1,
        0,
        0,
        0,
        0,
        now - dt.timedelta(minutes=10),
    ), "the priority -3 job has waited longest; the job due in an hour is scheduled"
    assert row(tx, DEPTHS, [2, "emails"])[:3] == (2, 1, 1), "claimable stops at the cap"

    tx.execute("SELECT codity.cancel(%s)", [later])
    for job in waiting:
        tx.execute("SELECT codity.cancel(%s)", [job])
    assert row(tx, DEPTHS, [2, "emails"]) == (0, 0, 1, 0, 0, 0, 2, None)


def test_a_bad_cap_is_refused(tx: Conn) -> None:
    with pytest.raises(psycopg.Error) as caught, tx.transaction():
        tx.execute("SELECT * FROM codity.queue_depths(NULL, 0)")
    assert caught.value.sqlstate == "CD010"


def _run(tx: Conn, queue: str, at: dt.datetime, *, fail: bool = False) -> None:
    """Enqueue, claim and finish one job at ``at`` (completed, or failed and retried)."""
    job = _enqueue(tx, queue, run_at=at)
    tx.execute("UPDATE codity.jobs SET status = 'queued' WHERE id = %s", [job])
    (worker,) = row(tx, "SELECT codity.register_worker('w', ARRAY[%s], p_now => %s)", [queue, at])
    got, fence = row(
        tx, "SELECT job_id, fence FROM codity.claim(%s, %s, 1, p_now => %s)", [worker, queue, at]
    )
    assert got == job
    tx.execute("SELECT codity.start(%s, %s, p_now => %s)", [job, fence, at])
    if fail:
        tx.execute("SELECT codity.fail(%s, %s, 'Boom: no', p_now => %s)", [job, fence, at])
    else:
        tx.execute("SELECT codity.complete(%s, %s, p_now => %s)", [job, fence, at])


MINUTES = (
    "SELECT minute, completed, failed, dead_lettered, claimable FROM codity.queue_minutes m"
    " JOIN codity.queues q ON q.id = m.queue_id WHERE q.name = %s ORDER BY minute"
)


def test_each_closed_minute_is_rolled_up_once_by_finish_time(tx: Conn) -> None:
    create_queue(tx, "emails", max_attempts=1, **NO_BACKOFF)
    tx.execute("UPDATE codity.rollup_state SET rolled_until = NULL")
    base = one(tx, "SELECT date_trunc('minute', now()) - interval '30 minutes'")
    second = dt.timedelta(seconds=1)
    _run(tx, "emails", base + 10 * second)
    _run(tx, "emails", base + 20 * second, fail=True)
    _run(tx, "emails", base + 65 * second)
    _enqueue(tx, "emails", priority=-5, run_at=base)  # claimable: the depth sample

    rolled = one(tx, "SELECT codity.roll_up(%s)", [base + 140 * second])
    assert rolled == 60, "a first roll-up covers the hour before the last closed minute"
    minute = dt.timedelta(minutes=1)
    assert tx.execute(MINUTES, ["emails"]).fetchall() == [
        (base, 1, 1, 1, 0),
        (base + minute, 1, 0, 0, 1),
    ], "the failed job (one attempt) was dead-lettered; the depth is sampled on the last minute"
    assert one(tx, "SELECT codity.roll_up(%s)", [base + 150 * second]) == 0, "nothing new closed"

    _run(tx, "emails", base + 150 * second)
    assert one(tx, "SELECT codity.roll_up(%s)", [base + 3 * minute + 10 * second]) == 0, (
        "a minute closes 15 s after it ends"
    )
    assert one(tx, "SELECT codity.roll_up(%s)", [base + 3 * minute + 16 * second]) == 1
    assert tx.execute(MINUTES, ["emails"]).fetchall()[-1] == (base + 2 * minute, 1, 0, 0, 1)


def test_rows_older_than_the_retention_are_deleted(tx: Conn) -> None:
    queue = create_queue(tx, "emails")
    tx.execute("UPDATE codity.rollup_state SET rolled_until = NULL, keep = interval '1 hour'")
    tx.execute(
        "INSERT INTO codity.queue_minutes (queue_id, project_id, minute, completed)"
        " SELECT q.id, q.project_id, date_trunc('minute', now()) - m.ago, m.n"
        " FROM codity.queues q,"
        " (VALUES (interval '2 hours', 5), (interval '30 minutes', 7)) AS m(ago, n)"
        " WHERE q.id = %s",
        [queue],
    )
    tx.execute("SELECT codity.roll_up()")
    assert [r[1] for r in tx.execute(MINUTES, ["emails"]).fetchall()] == [7]


def test_of_two_callers_one_rolls_up_and_the_other_does_not_wait(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as first, psycopg.connect(db_url) as second:
        first.execute("UPDATE codity.rollup_state SET rolled_until = NULL")
        second.execute("SELECT * FROM codity.rollup_state FOR UPDATE")
        first.execute("SET lock_timeout = '2s'")
        assert one(first, "SELECT codity.roll_up()") == 0, "the holder's turn; no wait, no error"
        second.rollback()
        assert one(first, "SELECT codity.roll_up()") == 60
        assert one(first, "SELECT codity.roll_up()") == 0
        assert one(first, "SELECT rolled_until FROM codity.rollup_state") == one(
            first, "SELECT date_trunc('minute', now() - interval '15 seconds')"
        )


def test_payload_ids_stay_in_the_project_and_in_the_transactions_tenant(tx: Conn) -> None:
    """codity.jobs_with_payload runs as the owner (so the GIN index serves it): the project
    filter is its own, and a transaction acting for one project never sees another's."""
    _, project_a = make_project(tx, "payload-a")
    _, project_b = make_project(tx, "payload-b")
    ids = {}
    for project in (project_a, project_b):
        tx.execute("SELECT * FROM codity.create_queue('emails', %s)", [project])
        ids[project] = [
            one(
                tx,
                "SELECT job_id FROM codity.enqueue('emails', 't', %s, p_project_id => %s)",
                [Jsonb(payload), project],
            )
            for payload in ({"customer": {"id": 42}, "x": 1}, {"customer": {"id": 7}})
        ]
    wanted = Jsonb({"customer": {"id": 42}})
    found = "SELECT array_agg(id) FROM codity.jobs_with_payload(%s, %s) AS id"
    tx.execute("SET LOCAL ROLE codity_app")
    assert one(tx, found, [wanted, project_a]) == [ids[project_a][0]]
    tx.execute("SELECT set_config('codity.project_id', %s, true)", [str(project_a)])
    assert one(tx, found, [wanted, project_b]) is None, "another project than the tenant's"
    assert one(tx, found, [wanted, project_a]) == [ids[project_a][0]]
    with pytest.raises(psycopg.Error) as refused, tx.transaction():
        tx.execute("SELECT * FROM codity.jobs_with_payload('[1]'::jsonb, %s)", [project_a])
    assert refused.value.sqlstate == "CD010"


def test_the_payload_filter_finds_jobs_in_every_state_held_ones_included(tx: Conn) -> None:
    """jobs_payload_idx leaves out the jobs workers hold (migration 0017), so
    jobs_with_payload reads those beside it: a claimed or running job is found too."""
    create_queue(tx, "emails")
    marker = Jsonb({"order": {"id": 7}})
    now = one(tx, "SELECT now()")

    def job(run_at: Any = None) -> int:
        query = "SELECT job_id FROM codity.enqueue('emails', 't', %s, p_run_at => %s)"
        return int(one(tx, query, [marker, run_at]))

    completed, running, claimed, queued = job(), job(), job(), job()
    scheduled = job(now + dt.timedelta(hours=1))
    one(tx, "SELECT job_id FROM codity.enqueue('emails', 't', '{\"order\": {\"id\": 8}}')")
    (worker,) = row(tx, "SELECT codity.register_worker('w', ARRAY['emails'])")
    claim = "SELECT job_id, fence FROM codity.claim(%s, 'emails', 1, p_start => %s)"
    done, fence = row(tx, claim, [worker, True])
    assert done == completed
    tx.execute("SELECT * FROM codity.complete(%s, %s)", [done, fence])
    assert row(tx, claim, [worker, True])[0] == running
    assert row(tx, claim, [worker, False])[0] == claimed
    states = dict(
        tx.execute(
            "SELECT id, status::text FROM codity.jobs WHERE payload @> %s", [marker]
        ).fetchall()
    )
    assert states == {completed: "completed", running: "running", claimed: "claimed",
                      queued: "queued", scheduled: "scheduled"}  # fmt: skip

    found = tx.execute("SELECT id FROM codity.jobs_with_payload(%s) AS id", [marker]).fetchall()
    assert [r[0] for r in found] == sorted(states, reverse=True), "every state, newest first"


def test_empty_payloads_match_the_empty_filter_only_in_their_project(tx: Conn) -> None:
    """The index leaves out '{}' (migration 0027): '{}' still matches every job of the
    project, newest first and within the tenant, and a job without arguments matches no
    other filter, finished or held."""
    _, project_a = make_project(tx, "empty-a")
    _, project_b = make_project(tx, "empty-b")
    enqueue = "SELECT job_id FROM codity.enqueue('emails', 't', %s, p_project_id => %s)"
    ids: dict[int, list[int]] = {}
    for project in (project_a, project_b):
        tx.execute("SELECT * FROM codity.create_queue('emails', %s)", [project])
        ids[project] = [int(one(tx, enqueue, [Jsonb(p), project])) for p in ({}, {"n": 1}, {})]
    register = "SELECT codity.register_worker('w', ARRAY['emails'], p_project_id => %s)"
    (worker,) = row(tx, register, [project_a])
    claim = "SELECT job_id, fence FROM codity.claim(%s, 'emails', 1, p_start => true)"
    done, fence = row(tx, claim, [worker])  # the first job, completed
    tx.execute("SELECT * FROM codity.complete(%s, %s)", [done, fence])
    row(tx, claim, [worker])  # the second, {"n": 1}, held
    found = "SELECT coalesce(array_agg(id), '{}') FROM codity.jobs_with_payload(%s, %s) AS id"
    a = ids[project_a]
    assert one(tx, found, [Jsonb({}), project_a]) == sorted(a, reverse=True)
    assert one(tx, found, [Jsonb({"n": 1}), project_a]) == [a[1]]
    assert one(tx, found, [Jsonb({"n": 2}), project_a]) == []
    limited = "SELECT array_agg(id) FROM codity.jobs_with_payload('{}', %s, 2) AS id"
    assert one(tx, limited, [project_a]) == sorted(a, reverse=True)[:2]
    tx.execute("SET LOCAL ROLE codity_app")
    tx.execute("SELECT set_config('codity.project_id', %s, true)", [str(project_a)])
    assert one(tx, found, [Jsonb({}), project_b]) == [], "another project than the tenant's"


def test_the_payload_filter_reads_its_index_for_the_jobs_no_worker_holds(tx: Conn) -> None:
    """The function's own statement, as auto_explain sends it back: its branch for the jobs
    no worker holds must imply the index's predicate, or no plan could use the index (with
    sequential scans off, the planner would still fall back to one)."""
    create_queue(tx, "emails")
    for n in range(50):
        one(tx, "SELECT job_id FROM codity.enqueue('emails', 't', %s)", [Jsonb({"n": n})])
    tx.execute("ANALYZE codity.jobs")
    tx.execute("LOAD 'auto_explain'")
    settings = {
        "auto_explain.log_min_duration": "0",
        "auto_explain.log_nested_statements": "on",
        "auto_explain.log_level": "notice",
        "enable_seqscan": "off",
    }
    for name, value in settings.items():
        tx.execute("SELECT set_config(%s, %s, true)", [name, value])
    plans: list[str] = []
    tx.add_notice_handler(lambda notice: plans.append(notice.message_primary or ""))
    assert one(tx, "SELECT count(*) FROM codity.jobs_with_payload('{\"n\": 3}')") == 1
    (plan,) = [p for p in plans if "UNION ALL" in p]
    assert "Bitmap Index Scan on jobs_payload_idx" in plan, plan


def test_depths_of_one_queue_count_that_queue_only(tx: Conn) -> None:
    create_queue(tx, "emails")
    create_queue(tx, "reports")
    _enqueue(tx, "emails")
    rows = tx.execute(
        "SELECT queue, claimable FROM codity.queue_depths(NULL, 100, p_queue => 'emails')"
    ).fetchall()
    assert rows == [("emails", 1)]
    assert tx.execute("SELECT count(*) FROM codity.queue_depths()").fetchone() == (2,)
    assert tx.execute("SELECT * FROM codity.queue_depths(p_queue => 'nope')").fetchall() == []
