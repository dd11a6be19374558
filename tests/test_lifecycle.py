"""The job lifecycle through the SQL API, from Python: transitions, backoff, dead letters,
refunds, dead workers, pause/resume and the NOTIFY wakeups.

Time moves through the functions' ``p_now`` arguments, never by sleeping. Notifications are
collected without timing guesses: after the action, a second connection sends a fence
notification on another channel, and since PostgreSQL delivers notifications in commit
order, everything the action raised arrives before the fence.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import TupleRow, dict_row
from psycopg.types.json import Jsonb

from codity.db.errors import IllegalTransition, translate
from tests.sqlapi import create_queue, make_project, one, row

Conn = psycopg.Connection[TupleRow]

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
CHANNEL = "codity_v1"
FENCE_CHANNEL = "codity_test_fence"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@dataclass(frozen=True)
class Claimed:
    job_id: int
    fence: int
    attempt: int


class Api:
    """The SQL API as plain calls, every one at an explicit time."""

    def __init__(self, conn: Conn) -> None:
        self.conn = conn

    def row(self, query: str, params: list[Any] | None = None) -> tuple[Any, ...]:
        return row(self.conn, query, params)

    def value(self, query: str, params: list[Any] | None = None) -> Any:
        return one(self.conn, query, params)

    def record(self, query: str, params: list[Any] | None = None) -> dict[str, Any]:
        with self.conn.cursor(row_factory=dict_row) as cur:
            found = cur.execute(query, params).fetchone()
        assert found is not None, query
        return found

    def queue(self, name: str, **policy: Any) -> int:
        return create_queue(self.conn, name, **policy)

    def worker(self, name: str = "w", now: datetime = T0) -> int:
        return int(self.value("SELECT codity.register_worker(%s, p_now => %s)", [name, now]))

    def enqueue(
        self,
        queue: str,
        payload: dict[str, Any] | None = None,
        *,
        run_at: datetime | None = None,
        now: datetime = T0,
    ) -> int:
        return int(
            self.value(
                "SELECT job_id FROM codity.enqueue(%s, 'task', %s, p_run_at => %s, p_now => %s)",
                [queue, Jsonb(payload or {}), run_at, now],
            )
        )

    def claim(self, worker: int, queue: str, limit: int = 1, now: datetime = T0) -> list[Claimed]:
        rows = self.conn.execute(
            "SELECT job_id, fence, attempt FROM codity.claim(%s, %s, %s, p_now => %s)",
            [worker, queue, limit, now],
        ).fetchall()
        return [Claimed(int(r[0]), int(r[1]), int(r[2])) for r in rows]

    def claim_one(self, worker: int, queue: str, now: datetime = T0) -> Claimed:
        (claimed,) = self.claim(worker, queue, 1, now)
        return claimed

    def start(self, c: Claimed, now: datetime = T0) -> None:
        assert self.value("SELECT accepted FROM codity.start(%s, %s, %s)", [c.job_id, c.fence, now])

    def complete(self, c: Claimed, now: datetime = T0) -> None:
        assert self.value(
            "SELECT accepted FROM codity.complete(%s, %s, p_now => %s)", [c.job_id, c.fence, now]
        )

    def fail(
        self, c: Claimed, error: str = "boom", *, retryable: bool = True, now: datetime = T0
    ) -> dict[str, Any]:
        return self.record(
            "SELECT * FROM codity.fail(%s, %s, %s, %s, %s)",
            [c.job_id, c.fence, error, retryable, now],
        )

    def release(self, c: Claimed, now: datetime = T0) -> None:
        assert self.value(
            "SELECT accepted FROM codity.release(%s, %s, %s)", [c.job_id, c.fence, now]
        )

    def reap(self, now: datetime) -> list[tuple[int, str]]:
        rows = self.conn.execute("SELECT job_id, outcome FROM codity.reap(%s)", [now]).fetchall()
        return [(int(r[0]), str(r[1])) for r in rows]

    def promote(self, now: datetime) -> int:
        return int(self.value("SELECT codity.promote(%s)", [now]))

    def cancel(self, job_id: int, now: datetime = T0) -> None:
        self.conn.execute("SELECT * FROM codity.cancel(%s, p_now => %s)", [job_id, now])

    def replay(self, dead_letter_id: int, now: datetime = T0) -> int:
        return int(
            self.value(
                "SELECT job_id FROM codity.replay_dead_letter(%s, p_now => %s)",
                [dead_letter_id, now],
            )
        )

    def job(self, job_id: int) -> dict[str, Any]:
        return self.record("SELECT * FROM codity.jobs WHERE id = %s", [job_id])

    def status(self, job_id: int) -> str:
        return str(self.value("SELECT status::text FROM codity.jobs WHERE id = %s", [job_id]))

    def execution(self, c: Claimed) -> dict[str, Any]:
        return self.record(
            "SELECT * FROM codity.job_executions WHERE job_id = %s AND execution_seq = %s",
            [c.job_id, c.fence],
        )

    def dead_letter_of(self, job_id: int) -> dict[str, Any]:
        return self.record("SELECT * FROM codity.dead_letters WHERE job_id = %s", [job_id])

    def worker_status(self, worker: int) -> str:
        return str(self.value("SELECT status::text FROM codity.workers WHERE id = %s", [worker]))


@pytest.fixture
def api(tx: Conn) -> Api:
    """The API in a transaction rolled back at the end: one connection is all a test here
    needs, except the NOTIFY tests below, which need commits (``live_api``)."""
    return Api(tx)


@pytest.fixture(scope="module")
def pure_api(shared_db_url: str) -> Iterator[Api]:
    """One connection for the tests of pure functions, which write nothing."""
    with psycopg.connect(shared_db_url, autocommit=True) as connection:
        yield Api(connection)


# ---------------------------------------------------------------------------------------
# Every allowed transition is reachable through the API
# ---------------------------------------------------------------------------------------


def _job_in(api: Api, status: str, **policy: Any) -> tuple[int, Claimed | None]:
    """A fresh job in the given status (in a queue of its own), and its claim if held."""
    queue = f"q-{status}"
    api.queue(queue, **policy)
    worker = api.worker()
    if status == "scheduled":
        job = api.enqueue(queue, run_at=at(60))
        assert api.status(job) == "scheduled"
        return job, None
    job = api.enqueue(queue, {"kind": status})
    if status == "queued":
        return job, None
    claimed = api.claim_one(worker, queue)
    if status == "claimed":
        return job, claimed
    api.start(claimed)
    if status == "running":
        return job, claimed
    assert status == "dead_letter"
    api.fail(claimed, "fatal", retryable=False)
    assert api.status(job) == "dead_letter"
    return job, claimed


def _promote(api: Api) -> None:
    job, _ = _job_in(api, "scheduled")
    assert api.promote(at(60)) == 1
    assert api.status(job) == "queued"


def _claim(api: Api) -> None:
    job, _ = _job_in(api, "queued")
    worker = api.worker("claimer")
    assert api.claim_one(worker, "q-queued").job_id == job
    assert api.status(job) == "claimed"


def _start(api: Api) -> None:
    job, claimed = _job_in(api, "claimed")
    assert claimed is not None
    api.start(claimed)
    assert api.status(job) == "running"


def _complete(api: Api) -> None:
    job, claimed = _job_in(api, "running")
    assert claimed is not None
    api.complete(claimed)
    assert api.status(job) == "completed"


def _fail(api: Api) -> None:
    # failed is the state fail() passes through: the execution says so, then the job moves on.
    job, claimed = _job_in(api, "running", max_attempts=3)
    assert claimed is not None
    api.fail(claimed, "SMTPError: 451")
    assert api.execution(claimed)["status"] == "failed"
    assert api.execution(claimed)["error"] == "SMTPError: 451"
    assert api.job(job)["last_error"] == "SMTPError: 451"


def _fail_and_retry(api: Api) -> None:
    job, claimed = _job_in(api, "running", max_attempts=3)
    assert claimed is not None
    outcome = api.fail(claimed)
    assert outcome["job_status"] == "scheduled"
    assert api.status(job) == "scheduled"


def _fail_last_attempt(api: Api) -> None:
    job, claimed = _job_in(api, "running", max_attempts=1)
    assert claimed is not None
    outcome = api.fail(claimed)
    assert outcome["job_status"] == "dead_letter"
    assert api.status(job) == "dead_letter"


def _release_claimed(api: Api) -> None:
    job, claimed = _job_in(api, "claimed")
    assert claimed is not None
    api.release(claimed)
    assert api.status(job) == "queued"


def _reap_running(api: Api) -> None:
    job, _ = _job_in(api, "running", lease_seconds=30)
    assert api.reap(at(30)) == [(job, "requeued")]
    assert api.status(job) == "queued"


def _reap_claimed_at_crash_cap(api: Api) -> None:
    job, _ = _job_in(api, "claimed", lease_seconds=30, max_crashes=1)
    assert api.reap(at(30)) == [(job, "dead_letter")]
    assert api.status(job) == "dead_letter"


def _reap_running_at_crash_cap(api: Api) -> None:
    job, _ = _job_in(api, "running", lease_seconds=30, max_crashes=1)
    assert api.reap(at(30)) == [(job, "dead_letter")]
    assert api.status(job) == "dead_letter"


def _replay(api: Api) -> None:
    job, _ = _job_in(api, "dead_letter")
    assert api.replay(int(api.dead_letter_of(job)["id"])) == job
    assert api.status(job) == "queued"


def _cancel_from(status: str) -> Callable[[Api], None]:
    def cancel(api: Api) -> None:
        job, _ = _job_in(api, status)
        api.cancel(job)
        assert api.status(job) == "cancelled"

    return cancel


def _workflow_child(api: Api, run_at: str | None = None) -> tuple[int, int]:
    """A workflow of two nodes, the child after the parent: (parent, child), both ids."""
    api.queue("wf")
    child: dict[str, Any] = {"key": "child", "queue": "wf", "task": "t", "after": ["parent"]}
    if run_at is not None:
        child["run_at"] = run_at
    spec = {"nodes": [{"key": "parent", "queue": "wf", "task": "t"}, child]}
    nodes: dict[str, int] = dict(
        api.conn.execute(
            "SELECT node_key, job_id FROM codity.enqueue_workflow(%s)", [Jsonb(spec)]
        ).fetchall()
    )
    assert api.status(nodes["child"]) == "waiting"
    return int(nodes["parent"]), int(nodes["child"])


def _release_from_waiting(run_at: str | None, status: str) -> Callable[[Api], None]:
    def release(api: Api) -> None:
        parent, child = _workflow_child(api, run_at)
        worker = api.value("SELECT codity.register_worker('wf-worker', ARRAY['wf'])")
        job, fence = api.row(
            "SELECT job_id, fence FROM codity.claim(%s, 'wf', 1, p_start => true)", [worker]
        )
        assert job == parent
        api.conn.execute("SELECT * FROM codity.complete(%s, %s)", [job, fence])
        assert api.status(child) == status

    return release


def _cancel_waiting(api: Api) -> None:
    _, child = _workflow_child(api)
    api.cancel(child)
    assert api.status(child) == "cancelled"


def _settled_workflow(
    api: Api, nodes: list[dict[str, Any]], fail: frozenset[str] = frozenset()
) -> tuple[int, dict[str, int]]:
    """Enqueue a workflow in queue wf (one attempt a job) and run it to the end, the nodes in
    ``fail`` dead-lettered: (workflow id, job ids by key)."""
    api.queue("wf", max_attempts=1)
    spec = {"nodes": [{"queue": "wf", "task": "t", **node} for node in nodes]}
    rows = api.conn.execute(
        "SELECT workflow_id, node_key, job_id FROM codity.enqueue_workflow(%s, p_now => %s)",
        [Jsonb(spec), T0],
    ).fetchall()
    ids = {str(key): int(job) for _, key, job in rows}
    key_of = {job: key for key, job in ids.items()}
    worker = api.worker("wf-worker")
    while claimed := api.claim(worker, "wf", 10):
        for c in claimed:
            api.start(c)
            if key_of[c.job_id] in fail:
                api.fail(c, retryable=False)
            else:
                api.complete(c)
    return int(rows[0][0]), ids


def _enqueued_workflow(api: Api, nodes: list[dict[str, Any]]) -> tuple[int, dict[str, int]]:
    api.queue("wf")
    spec = {"nodes": [{"queue": "wf", "task": "t", **node} for node in nodes]}
    rows = api.conn.execute(
        "SELECT workflow_id, node_key, job_id FROM codity.enqueue_workflow(%s)", [Jsonb(spec)]
    ).fetchall()
    return int(rows[0][0]), {str(key): int(job) for _, key, job in rows}


def _retry_to(
    mode: str, nodes: list[dict[str, Any]], fail: frozenset[str], key: str, status: str
) -> Callable[[Api], None]:
    """retry_workflow(mode) after the nodes ran (those in ``fail`` dead-lettered): the node
    ``key`` ends in ``status``. A key "!a" cancels node a first."""

    def retry(api: Api) -> None:
        workflow, ids = _settled_workflow(api, nodes, fail)
        if key.startswith("!"):
            api.cancel(ids[key[1:]])
        api.conn.execute("SELECT * FROM codity.retry_workflow(%s, %s)", [workflow, mode])
        assert api.status(ids[key.lstrip("!")]) == status

    return retry


def _skip_from(status: str) -> Callable[[Api], None]:
    """skip_node on a node in ``status``: completed without running."""

    def skip(api: Api) -> None:
        if status == "dead_letter":
            workflow, ids = _settled_workflow(api, [{"key": "a"}], frozenset({"a"}))
        else:
            a: dict[str, Any] = {"key": "a"}
            if status == "scheduled":
                a["run_at"] = "2100-01-01T00:00:00Z"
            workflow, ids = _enqueued_workflow(api, [a, {"key": "b", "after": ["a"]}])
            if status == "cancelled":
                api.cancel(ids["a"])
        key = "b" if status == "waiting" else "a"
        assert api.status(ids[key]) == status
        api.conn.execute("SELECT * FROM codity.skip_node(%s, %s)", [workflow, key])
        assert api.status(ids[key]) == "completed"

    return skip


_CHAIN: list[dict[str, Any]] = [{"key": "a"}, {"key": "b", "after": ["a"]}]
_IGNORED: list[dict[str, Any]] = [
    {"key": "a"},
    {"key": "b", "after": [{"key": "a", "on_failure": "ignore"}]},
]
_LATER: list[dict[str, Any]] = [{"key": "a", "run_at": "2100-01-01T00:00:00Z"}]

TRANSITIONS: dict[tuple[str, str], Callable[[Api], None]] = {
    ("waiting", "queued"): _release_from_waiting(None, "queued"),
    ("waiting", "scheduled"): _release_from_waiting("2100-01-01T00:00:00Z", "scheduled"),
    ("waiting", "cancelled"): _cancel_waiting,
    ("completed", "queued"): _retry_to("all", _CHAIN, frozenset(), "a", "queued"),
    ("completed", "waiting"): _retry_to("all", _CHAIN, frozenset(), "b", "waiting"),
    ("dead_letter", "waiting"): _retry_to(
        "failed", _IGNORED, frozenset({"a", "b"}), "b", "waiting"
    ),
    ("cancelled", "waiting"): _retry_to("failed", _CHAIN, frozenset({"a"}), "b", "waiting"),
    ("cancelled", "queued"): _retry_to("failed", _LATER, frozenset(), "!a", "queued"),
    ("waiting", "completed"): _skip_from("waiting"),
    ("scheduled", "completed"): _skip_from("scheduled"),
    ("queued", "completed"): _skip_from("queued"),
    ("dead_letter", "completed"): _skip_from("dead_letter"),
    ("cancelled", "completed"): _skip_from("cancelled"),
    ("scheduled", "queued"): _promote,
    ("queued", "claimed"): _claim,
    ("claimed", "running"): _start,
    ("running", "completed"): _complete,
    ("running", "failed"): _fail,
    ("failed", "scheduled"): _fail_and_retry,
    ("failed", "dead_letter"): _fail_last_attempt,
    ("claimed", "queued"): _release_claimed,
    ("running", "queued"): _reap_running,
    ("claimed", "dead_letter"): _reap_claimed_at_crash_cap,
    ("running", "dead_letter"): _reap_running_at_crash_cap,
    ("dead_letter", "queued"): _replay,
    ("scheduled", "cancelled"): _cancel_from("scheduled"),
    ("queued", "cancelled"): _cancel_from("queued"),
    ("claimed", "cancelled"): _cancel_from("claimed"),
    ("running", "cancelled"): _cancel_from("running"),
}


def test_every_allowed_transition_has_a_driver_here(tx: Conn) -> None:
    rows = tx.execute(
        "SELECT from_status::text, to_status::text FROM codity.job_transitions"
    ).fetchall()
    assert {(str(a), str(b)) for a, b in rows} == set(TRANSITIONS)


@pytest.mark.parametrize("transition", list(TRANSITIONS), ids=[f"{a}->{b}" for a, b in TRANSITIONS])
def test_allowed_transition_is_reachable_through_the_api(
    api: Api, transition: tuple[str, str]
) -> None:
    TRANSITIONS[transition](api)


ILLEGAL_MOVES = [
    ("claimed", "SELECT * FROM codity.complete(%(job)s, %(fence)s)", "claimed", "completed"),
    ("claimed", "SELECT * FROM codity.fail(%(job)s, %(fence)s, 'x')", "claimed", "failed"),
    ("dead_letter", "SELECT * FROM codity.cancel(%(job)s)", "dead_letter", "cancelled"),
]


@pytest.mark.parametrize(
    ("status", "query", "from_status", "to_status"),
    ILLEGAL_MOVES,
    ids=[f"{a}->{b}" for _, _, a, b in ILLEGAL_MOVES],
)
def test_illegal_move_raises_cd020_naming_both_states(
    api: Api, status: str, query: str, from_status: str, to_status: str
) -> None:
    job, claimed = _job_in(api, status)
    before = api.job(job)
    with pytest.raises(psycopg.Error) as caught, api.conn.transaction():
        api.conn.execute(query, {"job": job, "fence": claimed.fence if claimed else 0})
    assert caught.value.sqlstate == "CD020"
    assert (
        caught.value.diag.message_primary == f"illegal transition from {from_status} to {to_status}"
    )
    assert caught.value.diag.message_detail == f"Job {job} is {from_status}."
    assert isinstance(translate(caught.value), IllegalTransition)
    assert api.job(job) == before


def test_completed_job_cannot_be_cancelled(api: Api) -> None:
    job, claimed = _job_in(api, "running")
    assert claimed is not None
    api.complete(claimed)
    with pytest.raises(psycopg.Error) as caught:
        api.cancel(job)
    assert caught.value.sqlstate == "CD020"
    assert caught.value.diag.message_primary == "illegal transition from completed to cancelled"


# ---------------------------------------------------------------------------------------
# Backoff
# ---------------------------------------------------------------------------------------


def _delay_ms(api: Api, kind: str, base: int, cap: int, attempt: int, draw: float | None) -> float:
    if draw is None:
        query = "SELECT extract(epoch FROM codity.backoff_delay(%s, %s, %s, %s)) * 1000"
        params: list[Any] = [kind, base, cap, attempt]
    else:
        query = "SELECT extract(epoch FROM codity.backoff_delay(%s, %s, %s, %s, %s)) * 1000"
        params = [kind, base, cap, attempt, draw]
    return float(api.value(query, params))


@pytest.mark.parametrize(
    ("kind", "attempts_and_ms"),
    [
        ("fixed", [(1, 1000), (2, 1000), (5, 1000)]),
        ("linear", [(1, 1000), (2, 2000), (5, 5000)]),
        ("exponential", [(1, 1000), (2, 2000), (3, 4000), (5, 16000)]),
    ],
)
def test_backoff_curve_without_jitter(
    pure_api: Api, kind: str, attempts_and_ms: list[tuple[int, int]]
) -> None:
    for attempt, expected in attempts_and_ms:
        assert _delay_ms(pure_api, kind, 1000, 3_600_000, attempt, 1.0) == expected, (kind, attempt)


@pytest.mark.parametrize(("kind", "attempt"), [("fixed", 1), ("linear", 7), ("exponential", 9)])
def test_backoff_is_clamped_to_max_delay(pure_api: Api, kind: str, attempt: int) -> None:
    base = 1000 if kind != "fixed" else 9000
    assert _delay_ms(pure_api, kind, base, 5000, attempt, 1.0) == 5000


def test_backoff_never_overflows_at_high_attempts(pure_api: Api) -> None:
    assert _delay_ms(pure_api, "exponential", 1000, 60_000, 1000, 1.0) == 60_000


@pytest.mark.parametrize(("draw", "expected_ms"), [(0.0, 0), (0.1, 400), (0.5, 2000), (1.0, 4000)])
def test_full_jitter_scales_the_clamped_delay_by_the_draw(
    pure_api: Api, draw: float, expected_ms: int
) -> None:
    # exponential, attempt 5 = 16 s, clamped to 4 s, then times the draw.
    assert _delay_ms(pure_api, "exponential", 1000, 4000, 5, draw) == expected_ms


def test_full_jitter_draws_are_bounded_and_spread(pure_api: Api) -> None:
    draws = [_delay_ms(pure_api, "linear", 1000, 8000, 3, None) for _ in range(300)]
    assert all(0 <= d <= 3000 for d in draws)
    assert min(draws) < 750 and max(draws) > 2250, "300 uniform draws cover the range"
    assert len(set(draws)) > 150


def test_fail_schedules_the_retry_within_the_clamped_delay(api: Api) -> None:
    job, claimed = _job_in(
        api, "running", backoff="exponential", base_delay_ms=1000, max_delay_ms=1500
    )
    assert claimed is not None
    outcome = api.fail(claimed, now=at(0))
    retry_at = outcome["retry_at"]
    assert at(0) <= retry_at <= at(1), "attempt 1: up to base_delay"
    assert api.job(job)["run_at"] == retry_at
    worker = api.worker("again")
    api.promote(retry_at)
    second = api.claim_one(worker, "q-running", retry_at)
    api.start(second, retry_at)
    later = api.fail(second, now=retry_at)["retry_at"]
    assert retry_at <= later <= retry_at + timedelta(seconds=1.5), (
        "attempt 2: 2 s, clamped to 1.5 s"
    )


# ---------------------------------------------------------------------------------------
# Dead letters
# ---------------------------------------------------------------------------------------


def test_failing_the_last_attempt_dead_letters_with_payload_and_reason(api: Api) -> None:
    api.queue("imports", max_attempts=2, backoff="fixed", base_delay_ms=0, max_delay_ms=0)
    worker = api.worker()
    job = api.enqueue("imports", {"file": "a.csv"})
    first = api.claim_one(worker, "imports")
    api.start(first)
    assert api.fail(first, "bad row 7")["job_status"] == "scheduled"
    api.promote(at(1))
    second = api.claim_one(worker, "imports", at(1))
    assert second.attempt == 2
    api.start(second, at(1))

    outcome = api.fail(second, "bad row 7 again", now=at(2))

    assert outcome["job_status"] == "dead_letter"
    dead = api.dead_letter_of(job)
    assert dead["payload"] == {"file": "a.csv"}
    assert dead["task"] == "task"
    assert dead["reason"] == "failed: max attempts reached (2/2)"
    assert dead["error"] == "bad row 7 again"
    assert dead["attempts"] == 2
    assert dead["dead_at"] == at(2)


def test_non_retryable_failure_dead_letters_at_once(api: Api) -> None:
    job, claimed = _job_in(api, "running", max_attempts=10)
    assert claimed is not None
    outcome = api.fail(claimed, "ValueError: no such customer", retryable=False)
    assert outcome["job_status"] == "dead_letter"
    dead = api.dead_letter_of(job)
    assert dead["reason"] == "failed: not retryable"
    assert dead["attempts"] == 1
    assert dead["payload"] == {"kind": "running"}


def test_deleting_a_queue_or_a_project_deletes_its_executions_and_a_job_row_alone_does_not(
    api: Api,
) -> None:
    """An execution row carries no foreign key (migrations 0018, 0019): delete_queue and
    delete_project delete the executions of the queues they delete; a job row deleted by
    hand leaves its own."""
    _, project = make_project(api.conn, "history")
    executions = "SELECT count(*) FROM codity.job_executions WHERE queue_id = %s"
    queues = {}
    for name, owner in (("kept", None), ("dropped", None), ("elsewhere", project)):
        queues[name] = int(
            api.value("SELECT queue_id FROM codity.create_queue(%s, %s)", [name, owner])
        )
        worker = int(api.value("SELECT codity.register_worker(%s, ARRAY[%s], p_project_id => %s)",
                               [f"w-{name}", name, owner]))  # fmt: skip
        for _ in range(2):
            job = api.value("SELECT job_id FROM codity.enqueue(%s, 't', p_project_id => %s)",
                            [name, owner])  # fmt: skip
            claimed = api.row("SELECT job_id, fence FROM codity.claim(%s, %s, 1, p_start => true)",
                              [worker, name])  # fmt: skip
            assert claimed[0] == job
            api.value("SELECT accepted FROM codity.complete(%s, %s)", list(claimed))
        assert api.value(executions, [queues[name]]) == 2

    api.conn.execute("DELETE FROM codity.jobs WHERE queue_id = %s", [queues["kept"]])
    assert api.value(executions, [queues["kept"]]) == 2, "a job row alone: its history stays"
    assert api.value("SELECT codity.delete_queue('dropped')") == queues["dropped"]
    assert api.value(executions, [queues["dropped"]]) == 0
    assert api.value("SELECT codity.delete_project(%s)", [project]) == project
    assert api.value(executions, [queues["elsewhere"]]) == 0
    assert api.value("SELECT count(*) FROM codity.queues WHERE project_id = %s", [project]) == 0


def test_dead_letter_survives_its_jobs_deletion_and_replay_recreates_the_job(api: Api) -> None:
    job, _ = _job_in(api, "dead_letter")
    dead = api.dead_letter_of(job)
    api.conn.execute("DELETE FROM codity.jobs WHERE id = %s", [job])

    kept = api.record("SELECT * FROM codity.dead_letters WHERE id = %s", [dead["id"]])
    assert kept["job_id"] == job, "the id stays as history; no foreign key clears it (0015)"
    assert api.record("SELECT count(*) AS n FROM codity.jobs WHERE id = %s", [job])["n"] == 0
    assert kept["payload"] == {"kind": "dead_letter"}

    new_job = api.replay(int(dead["id"]), at(10))
    assert new_job != job
    recreated = api.job(new_job)
    assert (recreated["status"], recreated["task"], recreated["payload"]) == (
        "queued",
        "task",
        {"kind": "dead_letter"},
    )
    assert recreated["attempt"] == 0
    assert recreated["queue_id"] == dead["queue_id"]
    worker = api.worker("after-replay")
    assert api.claim_one(worker, "q-dead_letter", at(10)).job_id == new_job


# ---------------------------------------------------------------------------------------
# Refunds, drains, dead workers
# ---------------------------------------------------------------------------------------


def test_release_refunds_the_attempt(api: Api) -> None:
    job, claimed = _job_in(api, "running", max_attempts=1)
    assert claimed is not None and claimed.attempt == 1
    api.release(claimed)
    assert api.job(job)["attempt"] == 0
    execution = api.execution(claimed)
    assert (execution["status"], execution["attempt_refunded"]) == ("released", True)
    again = api.claim_one(api.worker("next"), "q-running")
    assert (again.job_id, again.attempt, again.fence) == (job, 1, 2)
    api.start(again)
    api.complete(again)
    assert api.status(job) == "completed", "a max_attempts = 1 job still gets its one real attempt"


def test_deregister_releases_the_jobs_the_worker_holds(api: Api) -> None:
    api.queue("drain")
    worker = api.worker("draining")
    jobs = [api.enqueue("drain") for _ in range(3)]
    held = api.claim(worker, "drain", 3)
    api.start(held[0])

    assert api.value("SELECT codity.deregister_worker(%s, %s)", [worker, at(1)]) == 3

    assert [api.status(j) for j in jobs] == ["queued"] * 3
    assert [api.job(j)["attempt"] for j in jobs] == [0, 0, 0]
    assert api.worker_status(worker) == "stopped"


def test_sweep_marks_a_silent_worker_dead_and_the_next_reap_requeues_at_once(api: Api) -> None:
    api.queue("slow", lease_seconds=300)
    silent = api.worker("silent")
    job = api.enqueue("slow")
    claimed = api.claim_one(silent, "slow")
    api.start(claimed)
    assert api.reap(at(20)) == [], "without the sweep, the 300 s lease keeps the job"

    swept = api.conn.execute("SELECT worker_id FROM codity.sweep_workers(%s)", [at(20)]).fetchall()

    assert swept == [(silent,)]
    assert api.worker_status(silent) == "dead"
    assert api.reap(at(20)) == [(job, "requeued")], "requeued 280 s before the lease would end"
    assert api.job(job)["attempt"] == 0
    assert api.execution(claimed)["attempt_refunded"] is True


def test_dead_worker_that_heartbeats_again_becomes_active(api: Api) -> None:
    api.queue("flaky", lease_seconds=30)
    worker = api.worker("frozen")
    job = api.enqueue("flaky")
    claimed = api.claim_one(worker, "flaky")
    api.conn.execute("SELECT * FROM codity.sweep_workers(%s)", [at(16)])
    api.reap(at(16))
    assert api.worker_status(worker) == "dead"

    states = api.conn.execute(
        "SELECT job_id, state FROM codity.heartbeat(%s, %s::bigint[], %s::integer[], %s)",
        [worker, [job], [claimed.fence], at(17)],
    ).fetchall()

    assert states == [(job, "lost")], "what was reaped while it was dead stays lost"
    assert api.worker_status(worker) == "active"
    assert api.claim_one(worker, "flaky", at(18)).fence == 2


# ---------------------------------------------------------------------------------------
# Pause / resume and the NOTIFY wakeups
# ---------------------------------------------------------------------------------------


@pytest.fixture
def live_api(conn: Conn) -> Api:
    """The API on an autocommit connection to a database of the test's own: NOTIFY is
    delivered at commit, so these tests commit each call."""
    return Api(conn)


@pytest.fixture
def listener(db_url: str) -> Iterator[Conn]:
    with psycopg.connect(db_url, autocommit=True) as connection:
        connection.execute(f"LISTEN {CHANNEL}")
        connection.execute(f"LISTEN {FENCE_CHANNEL}")
        yield connection


def notifications(listener: Conn, conn: Conn) -> list[str]:
    """Payloads on codity_v1 committed so far and not yet read: everything before a fence."""
    conn.execute(f"NOTIFY {FENCE_CHANNEL}")
    payloads: list[str] = []
    for notify in listener.notifies(timeout=30):
        if notify.channel == FENCE_CHANNEL:
            return payloads
        payloads.append(notify.payload)
    pytest.fail("the fence notification never arrived")


def test_pause_stops_claims_and_resume_wakes_the_queue_once(live_api: Api, listener: Conn) -> None:
    queue_id = live_api.queue("emails")
    worker = live_api.worker()
    job = live_api.enqueue("emails")
    assert live_api.value("SELECT codity.pause_queue('emails')")
    assert notifications(listener, live_api.conn) == [str(queue_id)], "the enqueue before the pause"

    assert live_api.claim(worker, "emails", 10) == []
    live_api.enqueue("emails")
    assert notifications(listener, live_api.conn) == [], (
        "neither pause nor enqueue into a paused queue wake"
    )

    assert live_api.value("SELECT codity.resume_queue('emails')")
    assert notifications(listener, live_api.conn) == [str(queue_id)]
    assert [c.job_id for c in live_api.claim(worker, "emails", 10)] == [job, job + 1]


def test_enqueue_of_a_due_job_notifies_once_and_of_a_delayed_one_not_at_all(
    live_api: Api, listener: Conn
) -> None:
    queue_id = live_api.queue("emails")
    live_api.enqueue("emails", run_at=at(3600))
    assert notifications(listener, live_api.conn) == []
    live_api.enqueue("emails")
    assert notifications(listener, live_api.conn) == [str(queue_id)]


def test_a_batch_of_100_due_jobs_raises_one_notification(live_api: Api, listener: Conn) -> None:
    queue_id = live_api.queue("bulk")
    jobs = Jsonb([{"task": "t", "payload": {"n": n}} for n in range(100)])
    rows = live_api.conn.execute("SELECT * FROM codity.enqueue_many('bulk', %s)", [jobs]).fetchall()
    assert len(rows) == 100
    assert notifications(listener, live_api.conn) == [str(queue_id)]


def test_promote_notifies_each_queue_with_due_jobs_once(live_api: Api, listener: Conn) -> None:
    first = live_api.queue("first")
    second = live_api.queue("second")
    live_api.queue("idle")
    for queue in ("first", "first", "second"):
        live_api.enqueue(queue, run_at=at(60))
    live_api.enqueue("idle", run_at=at(3600))
    assert notifications(listener, live_api.conn) == []

    assert live_api.promote(at(60)) == 3

    assert sorted(notifications(listener, live_api.conn)) == sorted([str(first), str(second)])


def test_claim_start_and_complete_raise_no_notification(live_api: Api, listener: Conn) -> None:
    live_api.queue("quiet")
    worker = live_api.worker()
    live_api.enqueue("quiet")
    notifications(listener, live_api.conn)

    claimed = live_api.claim_one(worker, "quiet")
    assert notifications(listener, live_api.conn) == []
    live_api.start(claimed)
    live_api.complete(claimed)
    assert notifications(listener, live_api.conn) == []


def test_the_bodies_by_queue_id_raise_no_notification_and_their_callers_do(
    live_api: Api, listener: Conn
) -> None:
    """DESIGN.md's rule 10: a body Citus may run on another node must not NOTIFY there; the
    wrappers, on the caller's side, wake the queue instead (and the worker for its own
    releases). Each pair: the body alone, then the wrapper."""
    queue_id = live_api.queue("wake")
    worker = live_api.worker()
    api = live_api.conn
    api.execute(
        'SELECT * FROM codity.enqueue_many_in_queue(%s, \'[{"task": "t"}]\', p_now => %s)',
        [queue_id, T0],
    )
    assert notifications(listener, api) == [], "enqueue_many_in_queue"
    api.execute("SELECT * FROM codity.enqueue_in_queue(%s, 't', p_now => %s)", [queue_id, T0])
    assert notifications(listener, api) == [], "enqueue_in_queue"
    for _ in range(3):
        live_api.enqueue("wake")
    assert notifications(listener, api) == [str(queue_id)] * 3, "enqueue, once per commit"

    first, second, third, fourth = live_api.claim(worker, "wake", 4)
    api.execute(
        "SELECT * FROM codity.release_in_queue(%s, %s, %s, p_now => %s)",
        [queue_id, first.job_id, first.fence, T0],
    )
    assert notifications(listener, api) == [], "release_in_queue"
    api.execute(
        "SELECT * FROM codity.release(%s, %s, p_now => %s)", [second.job_id, second.fence, T0]
    )
    assert notifications(listener, api) == [str(queue_id)], "release"

    # third and fourth are still held; past their lease both are reaped.
    later = at(3600)
    assert api.execute(
        "SELECT job_id, outcome FROM codity.reap_in_queue(%s, p_now => %s, p_limit => 1)",
        [queue_id, later],
    ).fetchall() == [(third.job_id, "requeued")]
    assert notifications(listener, api) == [], "reap_in_queue"
    assert api.execute("SELECT job_id FROM codity.reap(p_now => %s)", [later]).fetchall() == [
        (fourth.job_id,)
    ]
    assert notifications(listener, api) == [str(queue_id)], "reap"
