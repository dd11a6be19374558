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
from tests.faults import FAULTS, inject, patched_sources
from tests.logins import login_role
from tests.test_claim_concurrency import assert_no_job_handed_out_twice, run_claim_storm
from tests.test_clock import play_with_moved_clock
from tests.test_interleavings import requeue_and_reclaim, zombie_after_reap, zombie_batch_calls
from tests.test_pg_temp_attack import MARK, play_with_and_without_shadows


def test_every_fault_is_named_described_and_still_applies_to_the_code() -> None:
    assert set(FAULTS) == {"naive_claim", "no_refund", "no_fence", "pg_temp_first", "open_clock"}
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
    # Database-side detector, independently: attempts and fences past 1.
    assert storm.db_attempt_not_one > 0
    assert storm.db_jobs_with_several_executions > 0
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
    # The zombie's calls are no longer all refused: without the fence, its release is
    # accepted and takes the job away from B, its owner. (Its start, complete and fail now
    # raise instead of being refused: the lifecycle table or a CHECK on job_executions, which
    # will not reopen A's execution already closed as reaped, stops them, not the fence.)
    accepted = [call for call, outcome in z.stale_calls.items() if outcome.startswith("accepted")]
    assert accepted, z.stale_calls
    assert z.job_after_stale_calls != z.job_before_stale_calls
    # ... so B, the job's owner, is the one refused at the end.
    assert not z.b_complete_accepted
    assert z.final_status != "completed"


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
