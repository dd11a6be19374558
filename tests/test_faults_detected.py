"""Break it first, on every run: each injected fault is caught by the detector built for it.

A guarantee is only proven by a test that fails when its mechanism is removed. Each test
here injects one fault from tests/faults.py into its own fresh database and runs the same
harness the real tests use (imported from them, not copied), asserting that the harness
DOES see the violation. If a fault stopped being detected, or stopped being injectable
because the code it patches changed, this file fails. docs/TESTING.md records what the
whole suite reports under each fault (``CODITY_FAULT=<name> ./test``).
"""

from __future__ import annotations

import psycopg
import pytest
from psycopg import errors

from tests import sql_scenarios
from tests import test_worker_faults as worker_faults
from tests.faults import FAULTS, inject, patched_sources
from tests.logins import login_role
from tests.sqlapi import create_queue, hold_one_job
from tests.test_call_outcomes import call_twice
from tests.test_claim_concurrency import assert_no_job_handed_out_twice, run_claim_storm
from tests.test_clock import play_with_moved_clock
from tests.test_interleavings import requeue_and_reclaim, zombie_after_reap, zombie_batch_calls
from tests.test_pg_temp_attack import MARK, play_with_and_without_shadows
from tests.test_workflows import settle_both_at_once


def test_every_fault_is_named_described_and_still_applies_to_the_code() -> None:
    assert set(FAULTS) == {
        "naive_claim",
        "no_refund",
        "no_fence",
        "pg_temp_first",
        "open_clock",
        "repeat_is_stale",
        "any_queue",
        "no_isolation",
        "unlocked_release",
        "fold_keeps_events",
        "no_fold",
        "no_fold_first",
    }
    for name, description in FAULTS.items():
        assert description and "\n" not in description, name
        assert patched_sources(name), name  # raises when a snippet no longer matches


def test_unknown_fault_is_refused(db_url: str) -> None:
    with pytest.raises(ValueError, match="unknown fault 'no_such_fault'"):
        inject(db_url, "no_such_fault")


def test_claim_storm_detects_naive_select_then_update_claim(db_url: str) -> None:
    inject(db_url, "naive_claim")
    storm = run_claim_storm(db_url, jobs=300, loops=10)
    print("\n" + storm.report())
    # Client-side detector: the same job ids handed to several loops.
    assert storm.duplicates > 0
    assert storm.most_claims_of_one_job > 1
    # Database-side detector, independently: attempts and fences past 1, and the loser of
    # each double claim refused at completion (its execution row is never written).
    assert storm.db_attempt_not_one > 0
    assert storm.db_fence_rejections > 0
    assert storm.db_max_execution_seq > 1
    with pytest.raises(AssertionError):
        assert_no_job_handed_out_twice(storm)


def test_refund_check_detects_reaper_that_keeps_the_attempt(db_url: str) -> None:
    inject(db_url, "no_refund")
    r = requeue_and_reclaim(db_url, "reap")
    assert r.outcome == "requeued"
    assert r.attempt_after == 1  # should have been given back (0)
    assert r.attempt_at_reclaim == 2  # the crash was charged as an attempt


def test_refund_check_detects_release_that_keeps_the_attempt(db_url: str) -> None:
    inject(db_url, "no_refund")
    r = requeue_and_reclaim(db_url, "release")
    assert r.outcome == "queued"
    assert r.attempt_after == 1
    assert r.attempt_at_reclaim == 2


@pytest.mark.parametrize("owner_started", [True, False], ids=["owner-running", "owner-claimed"])
def test_zombie_check_detects_fenced_calls_without_fence(db_url: str, owner_started: bool) -> None:
    inject(db_url, "no_fence")
    z = zombie_after_reap(db_url, owner_started=owner_started)
    print(f"\nstale calls under no_fence: {z.stale_calls}")
    # The zombie's calls are no longer all refused: without the fence one of them (its
    # complete when B is running the job, its release when B has only claimed it) is
    # applied and takes the job away from B, its owner ...
    accepted = [call for call, outcome in z.stale_calls.items() if outcome.startswith("accepted")]
    assert accepted, z.stale_calls
    assert z.job_after_stale_calls != z.job_before_stale_calls
    # ... so B's own completion is not the one that counts at the end.
    assert not z.b_complete_accepted


def test_zombie_check_detects_batch_calls_without_fence(db_url: str) -> None:
    inject(db_url, "no_fence")
    z = zombie_batch_calls(db_url)
    # Without the fence the zombie starts and completes the job B now holds ...
    assert z.zombie_start_accepted or z.zombie_complete_accepted
    # ... and B, the owner, is refused.
    assert not (z.owner_start_accepted and z.owner_complete_accepted)


def test_shadow_check_detects_definers_that_search_pg_temp_first(db_url: str) -> None:
    inject(db_url, "pg_temp_first")
    with pytest.raises(errors.RaiseException, match=f"{MARK} as codity_owner"):
        play_with_and_without_shadows(db_url, "codity_worker")


def test_clock_check_detects_a_worker_moving_time(db_url: str) -> None:
    inject(db_url, "open_clock")
    with psycopg.connect(db_url, autocommit=True) as admin:
        world = sql_scenarios.set_up(admin)
    with login_role(db_url, "codity_worker") as url, psycopg.connect(url) as worker:
        outcomes = play_with_moved_clock(worker, "codity_worker", world)
        worker.rollback()
    assert outcomes["heartbeat"] == "accepted"
    assert "CD022" not in outcomes.values()


@pytest.mark.parametrize("call", ["complete_many", "fail", "release"])
def test_repeat_check_detects_an_owners_repeat_refused_as_stale(db_url: str, call: str) -> None:
    inject(db_url, "repeat_is_stale")
    with psycopg.connect(db_url, autocommit=True) as conn:
        _worker, job, fence = hold_one_job(conn)
        first, again, _before = call_twice(conn, call, job, fence)
        rejections = conn.execute("SELECT count(*) FROM codity.fence_rejections").fetchone()
    assert first[:2] == (True, "applied")
    assert again[:2] == (False, "stale")
    assert rejections == (1,)


def test_scope_check_detects_a_claim_outside_the_workers_queues(db_url: str) -> None:
    inject(db_url, "any_queue")
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT codity.create_queue('emails')")
        conn.execute("SELECT codity.create_queue('reports')")
        conn.execute("SELECT codity.enqueue('reports', 'not-mine')")
        (worker,) = conn.execute(
            "SELECT codity.register_worker('w', ARRAY['emails'])"
        ).fetchone() or (0,)
        claimed = conn.execute("SELECT task FROM codity.claim(%s, 'reports')", [worker]).fetchall()
    assert claimed == [("not-mine",)]


def test_isolation_check_detects_a_suspect_claimed_with_healthy_jobs(db_url: str) -> None:
    inject(db_url, "no_isolation")
    with (
        pytest.raises(AssertionError, match="busy: no suspect"),
        psycopg.connect(db_url, autocommit=True) as conn,
    ):
        worker_faults.test_a_job_with_a_crash_on_record_is_claimed_alone_and_only_by_an_idle_worker(
            conn
        )


def test_release_check_detects_a_child_counted_down_without_its_row_lock(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        create_queue(conn, "wf")
        create_queue(conn, "kids")
    inject(db_url, "unlocked_release")
    outcomes = [settle_both_at_once(db_url, run % 2) for run in range(6)]
    assert any(o != ("queued", 0, 1) for o in outcomes), outcomes
