"""Races decided by explicit interleavings on several real connections, never by sleeps.

Each test drives two or three connections through one chosen order: a transaction held
open (``conn.transaction()``) while another connection acts, then committed or rolled
back. Where one connection must wait for another's row lock, its call runs in a thread
and the test waits until PostgreSQL itself reports that backend waiting on a lock
(pg_stat_activity.wait_event_type = 'Lock' with an ungranted pg_locks entry), polled for a
bounded time. Time moves through the functions' ``p_now`` argument, from a fixed instant.

``zombie_after_reap`` and ``requeue_and_reclaim`` are also the detectors that
tests/test_faults_detected.py runs against the ``no_fence`` and ``no_refund`` faults.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import psycopg
import pytest

from tests import sqlapi

__all__ = [
    "BatchZombieOutcome",
    "RequeueOutcome",
    "ZombieOutcome",
    "at",
    "opened",
    "requeue_and_reclaim",
    "wait_until_blocked",
    "zombie_after_reap",
    "zombie_batch_calls",
]

Conn = psycopg.Connection[tuple[Any, ...]]
Connect = Callable[[], Conn]

QUEUE = "q"
LEASE_SECONDS = 30  # the queue default
T0 = datetime(2030, 1, 1, tzinfo=UTC)
BLOCK_TIMEOUT_S = 10.0


def at(seconds: float) -> datetime:
    """T0 plus a number of seconds: the p_now of one step of a scenario."""
    return T0 + timedelta(seconds=seconds)


# ---------------------------------------------------------------------------------------
# Connections and waiting
# ---------------------------------------------------------------------------------------


@contextmanager
def opened(url: str) -> Iterator[Connect]:
    """A factory of autocommit connections to ``url``, all closed on exit.

    Each has a lock_timeout, so a wait that should never happen ends in an error rather
    than hanging the suite.
    """
    with ExitStack() as stack:

        def connect() -> Conn:
            conn = stack.enter_context(psycopg.connect(url, autocommit=True))
            conn.execute("SET lock_timeout = '20s'")
            return conn

        yield connect


@pytest.fixture
def connect(db_url: str) -> Iterator[Connect]:
    with opened(db_url) as factory:
        yield factory


def wait_until_blocked(observer: Conn, pid: int, pending: Future[Any]) -> None:
    """Return once backend ``pid`` waits on a lock; fail if its call finishes instead."""
    deadline = time.monotonic() + BLOCK_TIMEOUT_S
    while True:
        if pending.done():
            raise AssertionError(
                f"backend {pid} was expected to wait for a lock but finished: {pending.result()!r}"
            )
        row = observer.execute(
            """
            SELECT a.wait_event_type,
                   EXISTS (SELECT 1 FROM pg_catalog.pg_locks l
                           WHERE l.pid = a.pid AND NOT l.granted)
            FROM pg_catalog.pg_stat_activity a
            WHERE a.pid = %s
            """,
            [pid],
        ).fetchone()
        if row is not None and row[0] == "Lock" and row[1]:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"backend {pid} never waited on a lock (last seen: {row!r})")
        # Only the polling interval: the order itself is decided by the lock, not by time.
        time.sleep(0.005)


# ---------------------------------------------------------------------------------------
# The worker protocol, one call each
# ---------------------------------------------------------------------------------------


def create_queue(
    conn: Conn, name: str = QUEUE, *, max_crashes: int = 5, max_attempts: int = 3
) -> None:
    sqlapi.create_queue(conn, name, max_attempts=max_attempts, max_crashes=max_crashes)


def enqueue(conn: Conn, *, key: str | None = None, queue: str = QUEUE) -> tuple[int, bool]:
    """Enqueue one job due at T0; returns (job id, is_new)."""
    row = sqlapi.row(
        conn,
        "SELECT job_id, is_new FROM codity.enqueue(%s, 'interleave.task', "
        "p_idempotency_key => %s, p_now => %s)",
        [queue, key, T0],
    )
    return int(row[0]), bool(row[1])


def register(conn: Conn, name: str, queue: str = QUEUE) -> int:
    return int(
        sqlapi.one(conn, "SELECT codity.register_worker(%s, ARRAY[%s]::text[])", [name, queue])
    )


def claim_one(conn: Conn, worker_id: int, now: datetime, queue: str = QUEUE) -> tuple[int, int]:
    """Claim exactly one job; returns (job id, fence)."""
    rows = conn.execute(
        "SELECT job_id, fence FROM codity.claim(%s, %s, 1, p_now => %s)", [worker_id, queue, now]
    ).fetchall()
    assert len(rows) == 1, rows
    return int(rows[0][0]), int(rows[0][1])


FencedCall = Literal["start", "complete", "fail", "release"]


def fenced(
    conn: Conn, call: FencedCall, job_id: int, fence: int, now: datetime
) -> tuple[bool, str]:
    """start / complete / fail / release with a fence; returns (applied, job status).

    Applied means the call changed the job (outcome 'applied'): a stale call is refused,
    and an 'already_applied' repeat changes nothing either.
    """
    extra = ", 'handler raised'" if call == "fail" else ""
    row = sqlapi.row(
        conn,
        f"SELECT outcome::text, job_status::text FROM codity.{call}(%s, %s{extra}, p_now => %s)",
        [job_id, fence, now],
    )
    return row[0] == "applied", str(row[1])


def heartbeat(conn: Conn, worker_id: int, job_id: int, fence: int, now: datetime) -> str:
    """Heartbeat one held job; returns its state: extended, cancelled or lost."""
    row = sqlapi.row(
        conn,
        "SELECT state FROM codity.heartbeat(%s, ARRAY[%s]::bigint[], ARRAY[%s]::integer[], %s)",
        [worker_id, job_id, fence, now],
    )
    return str(row[0])


def reap(conn: Conn, now: datetime) -> list[tuple[int, str]]:
    rows = conn.execute("SELECT job_id, outcome FROM codity.reap(%s)", [now]).fetchall()
    return [(int(r[0]), str(r[1])) for r in rows]


def cancel(conn: Conn, job_id: int, now: datetime) -> tuple[str, str]:
    row = sqlapi.row(
        conn,
        "SELECT previous_status::text, job_status::text FROM codity.cancel(%s, p_now => %s)",
        [job_id, now],
    )
    return str(row[0]), str(row[1])


def job_row(conn: Conn, job_id: int) -> dict[str, Any]:
    cur = conn.execute(
        """
        SELECT status::text, execution_seq, attempt, crash_count, worker_id, lock_expires_at,
               started_at, finished_at, last_error
        FROM codity.jobs WHERE id = %s
        """,
        [job_id],
    )
    row = cur.fetchone()
    assert row is not None and cur.description is not None
    return {column.name: value for column, value in zip(cur.description, row, strict=True)}


def executions(conn: Conn, job_id: int) -> list[tuple[int, str, int, bool]]:
    """(fence, status, attempt, attempt_refunded) per attempt, in order: the closed ones
    from job_executions, the one still held from the job row (codity.execution_overview)."""
    rows = conn.execute(
        """
        SELECT fence, status::text, attempt, attempt_refunded
        FROM codity.execution_overview WHERE job_id = %s ORDER BY fence
        """,
        [job_id],
    ).fetchall()
    return [(int(r[0]), str(r[1]), int(r[2]), bool(r[3])) for r in rows]


def rejections(conn: Conn, job_id: int) -> list[tuple[str, int, int | None, int | None]]:
    """(call, presented fence, current fence, worker id) per recorded stale call."""
    rows = conn.execute(
        """
        SELECT call, presented_fence, current_fence, worker_id
        FROM codity.fence_rejections WHERE job_id = %s ORDER BY id
        """,
        [job_id],
    ).fetchall()
    return [(str(r[0]), int(r[1]), r[2], r[3]) for r in rows]


def sqlstate_of(call: Callable[[], object]) -> str | None:
    """Run ``call``; the SQLSTATE it raised, or None when it returned."""
    try:
        call()
    except psycopg.Error as exc:
        return exc.sqlstate
    return None


# ---------------------------------------------------------------------------------------
# Scenarios shared with tests/test_faults_detected.py
# ---------------------------------------------------------------------------------------

STALE_CALLS: tuple[str, ...] = ("heartbeat", "start", "complete", "fail", "release")


@dataclass(frozen=True)
class ZombieOutcome:
    """Worker A's lease expired, it was reaped and worker B reclaimed; then A came back."""

    worker_a: int
    worker_b: int
    fence_a: int
    fence_b: int
    reaped: list[tuple[int, str]]
    stale_calls: dict[str, str]  # A's call -> rejected | accepted (...) | raised <sqlstate>
    job_before_stale_calls: dict[str, Any]
    job_after_stale_calls: dict[str, Any]
    rejections: list[tuple[str, int, int | None, int | None]]
    b_start_accepted: bool
    b_complete_accepted: bool
    accepted_completions: int
    final_status: str
    attempt: int
    executions: list[tuple[int, str, int, bool]]


def _stale_call(conn: Conn, call: str, worker_id: int, job_id: int, fence: int) -> str:
    now = at(40)
    try:
        if call == "heartbeat":
            state = heartbeat(conn, worker_id, job_id, fence, now)
            return "rejected" if state == "lost" else f"accepted ({state})"
        accepted, status = fenced(conn, call, job_id, fence, now)  # type: ignore[arg-type]
    except psycopg.Error as exc:
        return f"raised {exc.sqlstate}"
    return f"accepted ({status})" if accepted else "rejected"


def zombie_after_reap(url: str, *, owner_started: bool = True) -> ZombieOutcome:
    """A claims and starts (fence 1) and goes silent; the reaper requeues the job; B claims
    (fence 2); A then tries every fenced call with fence 1; B starts and completes.

    With ``owner_started`` B has already started the job when A comes back, otherwise A
    comes back between B's claim and B's start.
    """
    with opened(url) as connect:
        admin, a_conn, b_conn = connect(), connect(), connect()
        create_queue(admin)
        job_id, _ = enqueue(admin)
        worker_a = register(a_conn, "worker-a")
        worker_b = register(b_conn, "worker-b")

        claimed, fence_a = claim_one(a_conn, worker_a, at(0))
        assert claimed == job_id
        assert fenced(a_conn, "start", job_id, fence_a, at(1)) == (True, "running")
        reaped = reap(admin, at(LEASE_SECONDS + 1))
        reclaimed, fence_b = claim_one(b_conn, worker_b, at(32))
        assert reclaimed == job_id
        if owner_started:
            b_started, _ = fenced(b_conn, "start", job_id, fence_b, at(33))

        before = job_row(admin, job_id)
        stale = {call: _stale_call(a_conn, call, worker_a, job_id, fence_a) for call in STALE_CALLS}
        after = job_row(admin, job_id)
        if not owner_started:
            b_started = (
                _stale_call(b_conn, "start", worker_b, job_id, fence_b) == "accepted (running)"
            )
        b_accepted, _ = fenced(b_conn, "complete", job_id, fence_b, at(50))
        a_completed = stale["complete"].startswith("accepted")
        return ZombieOutcome(
            worker_a=worker_a,
            worker_b=worker_b,
            fence_a=fence_a,
            fence_b=fence_b,
            reaped=reaped,
            stale_calls=stale,
            job_before_stale_calls=before,
            job_after_stale_calls=after,
            rejections=rejections(admin, job_id),
            b_start_accepted=b_started,
            b_complete_accepted=b_accepted,
            accepted_completions=int(a_completed) + int(b_accepted),
            final_status=str(job_row(admin, job_id)["status"]),
            attempt=int(job_row(admin, job_id)["attempt"]),
            executions=executions(admin, job_id),
        )


def _batch(
    conn: Conn, call: Literal["start_many", "complete_many"], job_id: int, fence: int
) -> bool:
    row = sqlapi.row(
        conn,
        f"SELECT accepted FROM codity.{call}"
        "(ARRAY[%s]::bigint[], ARRAY[%s]::integer[], p_now => %s)",
        [job_id, fence, at(40)],
    )
    return bool(row[0])


@dataclass(frozen=True)
class BatchZombieOutcome:
    """Like ZombieOutcome, for the batch calls the Python worker uses."""

    zombie_start_accepted: bool
    zombie_complete_accepted: bool
    owner_start_accepted: bool
    owner_complete_accepted: bool
    rejections: list[tuple[str, int, int | None, int | None]]
    executions: list[tuple[int, str, int, bool]]


def zombie_batch_calls(url: str) -> BatchZombieOutcome:
    """A claims and starts (fence 1) and goes silent; the reaper requeues the job; B claims
    (fence 2); A then sends start_many and complete_many with fence 1; B does the same with
    fence 2."""
    with opened(url) as connect:
        admin, a_conn, b_conn = connect(), connect(), connect()
        create_queue(admin)
        job_id, _ = enqueue(admin)
        worker_a = register(a_conn, "worker-a")
        worker_b = register(b_conn, "worker-b")
        _, fence_a = claim_one(a_conn, worker_a, at(0))
        assert _batch(a_conn, "start_many", job_id, fence_a)
        reap(admin, at(LEASE_SECONDS + 1))
        _, fence_b = claim_one(b_conn, worker_b, at(32))
        zombie_start = _batch(a_conn, "start_many", job_id, fence_a)
        zombie_complete = _batch(a_conn, "complete_many", job_id, fence_a)
        owner_start = _batch(b_conn, "start_many", job_id, fence_b)
        owner_complete = _batch(b_conn, "complete_many", job_id, fence_b)
        return BatchZombieOutcome(
            zombie_start_accepted=zombie_start,
            zombie_complete_accepted=zombie_complete,
            owner_start_accepted=owner_start,
            owner_complete_accepted=owner_complete,
            rejections=rejections(admin, job_id),
            executions=executions(admin, job_id),
        )


@dataclass(frozen=True)
class RequeueOutcome:
    """A job claimed, then given back by the reaper or by release, then claimed again."""

    how: str
    attempt_at_claim: int
    outcome: str
    status_after: str
    attempt_after: int
    crash_count_after: int
    execution_after: tuple[int, str, int, bool]
    attempt_at_reclaim: int
    fence_at_reclaim: int


def requeue_and_reclaim(url: str, how: Literal["reap", "release"]) -> RequeueOutcome:
    with opened(url) as connect:
        admin, worker_conn = connect(), connect()
        create_queue(admin)
        job_id, _ = enqueue(admin)
        worker = register(worker_conn, "worker")
        _, fence = claim_one(worker_conn, worker, at(0))
        attempt_at_claim = int(job_row(admin, job_id)["attempt"])
        assert fenced(worker_conn, "start", job_id, fence, at(1)) == (True, "running")
        if how == "reap":
            reaped = reap(admin, at(LEASE_SECONDS + 1))
            assert [job for job, _ in reaped] == [job_id]
            outcome = reaped[0][1]
        else:
            accepted, status = fenced(worker_conn, "release", job_id, fence, at(2))
            outcome = status if accepted else "rejected"
        after = job_row(admin, job_id)
        (execution,) = executions(admin, job_id)
        _, fence_again = claim_one(worker_conn, worker, at(LEASE_SECONDS + 2))
        return RequeueOutcome(
            how=how,
            attempt_at_claim=attempt_at_claim,
            outcome=outcome,
            status_after=str(after["status"]),
            attempt_after=int(after["attempt"]),
            crash_count_after=int(after["crash_count"]),
            execution_after=execution,
            attempt_at_reclaim=int(job_row(admin, job_id)["attempt"]),
            fence_at_reclaim=fence_again,
        )


# ---------------------------------------------------------------------------------------
# Fencing: a zombie worker cannot finish a job someone else now owns
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("owner_started", [True, False], ids=["owner-running", "owner-claimed"])
def test_zombie_worker_cannot_touch_a_job_reclaimed_after_its_lease_expired(
    db_url: str, owner_started: bool
) -> None:
    z = zombie_after_reap(db_url, owner_started=owner_started)
    assert z.reaped[0][1] == "requeued"
    assert (z.fence_a, z.fence_b) == (1, 2)
    # Every call A makes with its old fence is refused, and changes nothing ...
    assert z.stale_calls == dict.fromkeys(STALE_CALLS, "rejected")
    assert z.job_after_stale_calls == z.job_before_stale_calls
    assert z.job_before_stale_calls["worker_id"] == z.worker_b
    # ... and is written down, naming A, its fence and the current one.
    assert z.rejections == [(call, 1, 2, z.worker_a) for call in STALE_CALLS]
    # B finishes normally: exactly one completion was accepted, and it was B's.
    assert z.b_start_accepted
    assert z.b_complete_accepted
    assert z.accepted_completions == 1
    assert z.final_status == "completed"
    # A's attempt was refunded: one attempt charged in all.
    assert z.attempt == 1
    assert z.executions == [(1, "reaped", 1, True), (2, "completed", 1, False)]


# ---------------------------------------------------------------------------------------
# The reaper: refund, crash cap
# ---------------------------------------------------------------------------------------


def test_zombie_worker_batch_calls_are_refused_too(db_url: str) -> None:
    z = zombie_batch_calls(db_url)
    assert not z.zombie_start_accepted
    assert not z.zombie_complete_accepted
    assert z.owner_start_accepted
    assert z.owner_complete_accepted
    assert [r[0] for r in z.rejections] == ["start", "complete"]
    assert [(r[1], r[2]) for r in z.rejections] == [(1, 2), (1, 2)]


def test_reaped_job_refunds_attempt(db_url: str) -> None:
    r = requeue_and_reclaim(db_url, "reap")
    assert r.attempt_at_claim == 1
    assert r.outcome == "requeued"
    assert (r.status_after, r.attempt_after, r.crash_count_after) == ("queued", 0, 1)
    assert r.execution_after == (1, "reaped", 1, True)
    assert (r.attempt_at_reclaim, r.fence_at_reclaim) == (1, 2)


def test_released_job_refunds_attempt(db_url: str) -> None:
    r = requeue_and_reclaim(db_url, "release")
    assert r.outcome == "queued"
    assert (r.status_after, r.attempt_after, r.crash_count_after) == ("queued", 0, 0)
    assert r.execution_after == (1, "released", 1, True)
    assert (r.attempt_at_reclaim, r.fence_at_reclaim) == (1, 2)


def test_reap_records_why_the_execution_ended(tx: Conn) -> None:
    create_queue(tx)
    job_id, _ = enqueue(tx)
    worker = register(tx, "worker")
    claim_one(tx, worker, at(0))
    assert reap(tx, at(LEASE_SECONDS)) == [(job_id, "requeued")]  # expiry is inclusive
    row = sqlapi.row(
        tx,
        "SELECT status::text, finished_at, error FROM codity.job_executions WHERE job_id = %s",
        [job_id],
    )
    assert row[0] == "reaped"
    assert row[1] == at(LEASE_SECONDS)
    assert "lease expired" in row[2]


def test_three_crashes_against_three_attempts_do_not_exhaust_the_job(tx: Conn) -> None:
    """Three rolling deploys against max_attempts = 3: the job never failed, so it may still
    fail once and be retried."""
    create_queue(tx, max_attempts=3, max_crashes=5)
    job_id, _ = enqueue(tx)
    worker = register(tx, "worker")
    attempts: list[int] = []
    for deploy in range(3):
        _, fence = claim_one(tx, worker, at(100 * deploy))
        attempts.append(int(job_row(tx, job_id)["attempt"]))
        assert reap(tx, at(100 * deploy + LEASE_SECONDS + 1)) == [(job_id, "requeued")]
    _, fence = claim_one(tx, worker, at(1000))
    attempts.append(int(job_row(tx, job_id)["attempt"]))
    assert attempts == [1, 1, 1, 1]
    assert fenced(tx, "start", job_id, fence, at(1001)) == (True, "running")
    assert fenced(tx, "fail", job_id, fence, at(1002)) == (True, "scheduled")


def test_job_reaped_max_crashes_times_is_dead_lettered(tx: Conn) -> None:
    create_queue(tx, max_crashes=3)
    job_id, _ = enqueue(tx)
    worker = register(tx, "worker")
    outcomes: list[str] = []
    for crash in range(3):
        claim_one(tx, worker, at(100 * crash))
        outcomes.extend(outcome for _, outcome in reap(tx, at(100 * crash + LEASE_SECONDS + 1)))
    assert outcomes == ["requeued", "requeued", "dead_letter"]
    job = job_row(tx, job_id)
    assert (job["status"], job["crash_count"], job["attempt"]) == ("dead_letter", 3, 1)
    assert job["lock_expires_at"] is None and job["finished_at"] == at(231)
    reason, attempts = sqlapi.row(
        tx, "SELECT reason, attempts FROM codity.dead_letters WHERE job_id = %s", [job_id]
    )
    assert "max_crashes 3" in reason and "3 times" in reason
    assert attempts == 1
    assert executions(tx, job_id)[-1] == (3, "reaped", 1, False)
    # Nothing left to hand out, and the reaper has nothing more to do.
    assert (
        tx.execute(
            "SELECT * FROM codity.claim(%s, %s, 1, p_now => %s)", [worker, QUEUE, at(1000)]
        ).fetchall()
        == []
    )
    assert reap(tx, at(1000)) == []


# ---------------------------------------------------------------------------------------
# Heartbeat against the reaper, at the instant the lease expires
# ---------------------------------------------------------------------------------------

EXPIRY = LEASE_SECONDS  # claimed at T0, the lease ends at T0 + 30 s
JUST_AFTER_EXPIRY = EXPIRY + 0.001


def _held_job(conn: Conn) -> tuple[int, int, int]:
    """A queue, a worker, and one job it claimed at T0; returns (worker, job, fence)."""
    create_queue(conn)
    job_id, _ = enqueue(conn)
    worker = register(conn, "worker")
    assert claim_one(conn, worker, at(0)) == (job_id, 1)
    return worker, job_id, 1


def test_heartbeat_committed_before_the_reaper_keeps_the_job(connect: Connect) -> None:
    admin, worker_conn = connect(), connect()
    worker, job_id, fence = _held_job(worker_conn)
    assert heartbeat(worker_conn, worker, job_id, fence, at(EXPIRY)) == "extended"
    assert reap(admin, at(JUST_AFTER_EXPIRY)) == []
    job = job_row(admin, job_id)
    assert (job["status"], job["execution_seq"], job["worker_id"]) == ("claimed", fence, worker)
    assert job["lock_expires_at"] == at(EXPIRY + LEASE_SECONDS)
    assert executions(admin, job_id) == [(1, "claimed", 1, False)]


def test_reaper_committed_before_the_heartbeat_makes_it_report_lost(connect: Connect) -> None:
    admin, worker_conn = connect(), connect()
    worker, job_id, fence = _held_job(worker_conn)
    assert reap(admin, at(JUST_AFTER_EXPIRY)) == [(job_id, "requeued")]
    assert heartbeat(worker_conn, worker, job_id, fence, at(EXPIRY)) == "lost"
    assert job_row(admin, job_id)["status"] == "queued"
    assert rejections(admin, job_id) == [("heartbeat", fence, fence, worker)]


def test_heartbeat_waiting_on_an_open_reap_reports_lost_once_it_commits(connect: Connect) -> None:
    admin, reaper, worker_conn, observer = connect(), connect(), connect(), connect()
    worker, job_id, fence = _held_job(worker_conn)
    pid = worker_conn.info.backend_pid
    with ThreadPoolExecutor(max_workers=1) as pool:
        with reaper.transaction():
            assert reap(reaper, at(JUST_AFTER_EXPIRY)) == [(job_id, "requeued")]
            pending = pool.submit(heartbeat, worker_conn, worker, job_id, fence, at(EXPIRY))
            wait_until_blocked(observer, pid, pending)
        assert pending.result(timeout=BLOCK_TIMEOUT_S) == "lost"
    job = job_row(admin, job_id)
    assert (job["status"], job["lock_expires_at"]) == ("queued", None)
    assert executions(admin, job_id) == [(1, "reaped", 1, True)]


def test_reaper_skips_a_job_whose_heartbeat_is_in_flight(connect: Connect) -> None:
    admin, reaper, worker_conn = connect(), connect(), connect()
    worker, job_id, fence = _held_job(worker_conn)
    with worker_conn.transaction():
        assert heartbeat(worker_conn, worker, job_id, fence, at(EXPIRY)) == "extended"
        # The heartbeat holds the job's row lock: SKIP LOCKED passes over it, without waiting.
        assert reap(reaper, at(JUST_AFTER_EXPIRY)) == []
    assert reap(reaper, at(JUST_AFTER_EXPIRY)) == []  # committed: the lease is now in the future
    job = job_row(admin, job_id)
    assert (job["status"], job["execution_seq"]) == ("claimed", fence)
    assert job["lock_expires_at"] == at(EXPIRY + LEASE_SECONDS)


# ---------------------------------------------------------------------------------------
# Cancel against complete: exactly one wins, the loser sees the winner's state
# ---------------------------------------------------------------------------------------


def _running_job(conn: Conn) -> tuple[int, int]:
    _, job_id, fence = _held_job(conn)
    assert fenced(conn, "start", job_id, fence, at(1)) == (True, "running")
    return job_id, fence


def test_cancel_after_complete_is_an_illegal_transition(connect: Connect) -> None:
    operator, worker_conn = connect(), connect()
    job_id, fence = _running_job(worker_conn)
    assert fenced(worker_conn, "complete", job_id, fence, at(2)) == (True, "completed")
    assert sqlstate_of(lambda: cancel(operator, job_id, at(3))) == "CD020"
    assert job_row(operator, job_id)["status"] == "completed"
    assert executions(operator, job_id) == [(1, "completed", 1, False)]


def test_complete_after_cancel_is_refused_as_stale(connect: Connect) -> None:
    operator, worker_conn = connect(), connect()
    job_id, fence = _running_job(worker_conn)
    assert cancel(operator, job_id, at(2)) == ("running", "cancelled")
    assert fenced(worker_conn, "complete", job_id, fence, at(3)) == (False, "cancelled")
    assert job_row(operator, job_id)["status"] == "cancelled"
    assert executions(operator, job_id) == [(1, "cancelled", 1, False)]
    assert [r[:3] for r in rejections(operator, job_id)] == [("complete", fence, fence)]


def test_cancel_waiting_on_an_open_complete_raises_once_it_commits(connect: Connect) -> None:
    operator, worker_conn, observer = connect(), connect(), connect()
    job_id, fence = _running_job(worker_conn)
    pid = operator.info.backend_pid
    with ThreadPoolExecutor(max_workers=1) as pool:
        with worker_conn.transaction():
            assert fenced(worker_conn, "complete", job_id, fence, at(2)) == (True, "completed")
            pending = pool.submit(sqlstate_of, lambda: cancel(operator, job_id, at(2)))
            wait_until_blocked(observer, pid, pending)
        assert pending.result(timeout=BLOCK_TIMEOUT_S) == "CD020"
    assert job_row(observer, job_id)["status"] == "completed"
    assert executions(observer, job_id) == [(1, "completed", 1, False)]


def test_complete_waiting_on_an_open_cancel_is_refused_once_it_commits(connect: Connect) -> None:
    operator, worker_conn, observer = connect(), connect(), connect()
    job_id, fence = _running_job(worker_conn)
    pid = worker_conn.info.backend_pid
    with ThreadPoolExecutor(max_workers=1) as pool:
        with operator.transaction():
            assert cancel(operator, job_id, at(2)) == ("running", "cancelled")
            pending = pool.submit(fenced, worker_conn, "complete", job_id, fence, at(2))
            wait_until_blocked(observer, pid, pending)
        assert pending.result(timeout=BLOCK_TIMEOUT_S) == (False, "cancelled")
    assert job_row(observer, job_id)["status"] == "cancelled"
    assert executions(observer, job_id) == [(1, "cancelled", 1, False)]
    assert [r[:3] for r in rejections(observer, job_id)] == [("complete", fence, fence)]


# ---------------------------------------------------------------------------------------
# Cron: several schedulers, no leader, one of them rolls back
# ---------------------------------------------------------------------------------------

FIRST_OCCURRENCE = at(60)  # '* * * * *' created at T0 first fires one minute later
SECOND_OCCURRENCE = at(120)


def materialize(conn: Conn, now: datetime) -> list[tuple[int, datetime]]:
    """One scheduler tick's cron step; returns (job id, due_at) per job it created."""
    rows = conn.execute("SELECT job_id, due_at FROM codity.materialize_cron(%s)", [now]).fetchall()
    return [(int(r[0]), r[1]) for r in rows]


def jobs_per_occurrence(conn: Conn) -> dict[datetime, int]:
    rows = conn.execute(
        "SELECT run_at, count(*) FROM codity.jobs WHERE schedule_id IS NOT NULL "
        "GROUP BY run_at ORDER BY run_at"
    ).fetchall()
    return {r[0]: int(r[1]) for r in rows}


def _every_minute(conn: Conn) -> None:
    create_queue(conn)
    row = sqlapi.row(
        conn,
        "SELECT next_run_at FROM codity.create_schedule('every-minute', %s, '* * * * *', "
        "'cron.task', p_now => %s)",
        [QUEUE, T0],
    )
    assert row[0] == FIRST_OCCURRENCE


def test_cron_occurrence_is_created_once_by_three_schedulers_when_one_rolls_back(
    connect: Connect,
) -> None:
    admin, s1, s2, s3 = connect(), connect(), connect(), connect()
    _every_minute(admin)
    tick = FIRST_OCCURRENCE + timedelta(seconds=5)
    # All three ticks in flight at once; s1 takes the schedule row, s2 and s3 skip it
    # (SKIP LOCKED: they do not wait), s3 rolls back, the others commit.
    with s1.transaction(), s2.transaction(), s3.transaction(force_rollback=True):
        made = [materialize(s1, tick), materialize(s2, tick), materialize(s3, tick)]
    assert [len(m) for m in made] == [1, 0, 0]
    assert made[0][0][1] == FIRST_OCCURRENCE
    # Later ticks by the survivors, within the same minute, create nothing more.
    assert materialize(s1, tick + timedelta(seconds=10)) == []
    assert materialize(s2, tick + timedelta(seconds=20)) == []
    assert jobs_per_occurrence(admin) == {FIRST_OCCURRENCE: 1}


def test_cron_occurrence_abandoned_by_a_rolled_back_scheduler_is_created_once_by_a_survivor(
    connect: Connect,
) -> None:
    admin, s1, s2, s3 = connect(), connect(), connect(), connect()
    _every_minute(admin)
    tick = FIRST_OCCURRENCE + timedelta(seconds=5)
    # s1 creates the job and then rolls back; s2 and s3 skipped the locked row meanwhile.
    with s1.transaction(force_rollback=True), s2.transaction(), s3.transaction():
        made = [materialize(s1, tick), materialize(s2, tick), materialize(s3, tick)]
    assert [len(m) for m in made] == [1, 0, 0]
    assert jobs_per_occurrence(admin) == {}
    # The survivors' next ticks: exactly one of them creates the occurrence.
    later = tick + timedelta(seconds=10)
    with s2.transaction(), s3.transaction():
        retried = [materialize(s2, later), materialize(s3, later)]
    assert sorted(len(m) for m in retried) == [0, 1]
    assert [m[0][1] for m in retried if m] == [FIRST_OCCURRENCE]
    assert materialize(s2, later + timedelta(seconds=1)) == []
    assert materialize(s3, later + timedelta(seconds=2)) == []
    assert jobs_per_occurrence(admin) == {FIRST_OCCURRENCE: 1}
    # And the next minute is created once too.
    next_tick = SECOND_OCCURRENCE + timedelta(seconds=1)
    assert [len(materialize(s, next_tick)) for s in (s1, s2, s3)] == [1, 0, 0]
    assert jobs_per_occurrence(admin) == {FIRST_OCCURRENCE: 1, SECOND_OCCURRENCE: 1}


# ---------------------------------------------------------------------------------------
# Idempotency keys: two enqueues of one key at once
# ---------------------------------------------------------------------------------------


def _jobs_with_key(conn: Conn, key: str) -> list[int]:
    rows = conn.execute(
        "SELECT id FROM codity.jobs WHERE idempotency_key = %s ORDER BY id", [key]
    ).fetchall()
    return [int(r[0]) for r in rows]


def test_second_enqueue_of_a_key_waits_and_returns_the_committed_job(connect: Connect) -> None:
    admin, first, second, observer = connect(), connect(), connect(), connect()
    create_queue(admin)
    pid = second.info.backend_pid
    with ThreadPoolExecutor(max_workers=1) as pool:
        with first.transaction():
            job_id, is_new = enqueue(first, key="k")
            assert is_new
            pending = pool.submit(enqueue, second, key="k")
            wait_until_blocked(observer, pid, pending)
        assert pending.result(timeout=BLOCK_TIMEOUT_S) == (job_id, False)
    assert _jobs_with_key(admin, "k") == [job_id]


def test_second_enqueue_of_a_key_inserts_when_the_first_rolls_back(connect: Connect) -> None:
    admin, first, second, observer = connect(), connect(), connect(), connect()
    create_queue(admin)
    pid = second.info.backend_pid
    with ThreadPoolExecutor(max_workers=1) as pool:
        with first.transaction(force_rollback=True):
            abandoned, is_new = enqueue(first, key="k")
            assert is_new
            pending = pool.submit(enqueue, second, key="k")
            wait_until_blocked(observer, pid, pending)
        job_id, is_new = pending.result(timeout=BLOCK_TIMEOUT_S)
    assert is_new
    assert job_id != abandoned
    assert _jobs_with_key(admin, "k") == [job_id]
