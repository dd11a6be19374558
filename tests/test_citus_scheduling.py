"""The scheduler's and the queues' guarantees on a real Citus 14 cluster, with queues on both
worker nodes at once.

- Cron exactly once: three connections tick together (a barrier at each 15 s step of
  ``p_now``, across three minute boundaries) over schedules of eight queues spread over both
  nodes; then three real ``codity scheduler`` processes fire schedules made overdue in one
  commit. One job per schedule per minute, none missed, none twice.
- Retries, backoff, dead letters, replay, through the worker's own calls (delegated to the
  queue's node) with time moved by ``p_now``: each retry is due within its clamped backoff,
  the last failure dead-letters the job with its payload and reason, the replayed job runs.
- Pause and resume: a paused queue on one node hands out nothing while a queue on the other
  node goes on; resume wakes the paused queue's listeners (a NOTIFY on the coordinator).
- ``max_running`` and rate limits exact across nodes: real workers serving two limited queues
  on two nodes at once; the handlers' own intervals never overlap deeper than the limit in
  either queue (and reach it), and no window of the database's clock holds more claims of a
  queue than its rate.

Break it (DESIGN.md, "Break it first"): ``materialize_cron`` without its ``FOR UPDATE SKIP
LOCKED`` and with an idempotency key that names the scheduler's ``p_now`` creates duplicates
the cron tests count; ``_limit_room`` without its ``FOR UPDATE`` lets a fourth job run (as on
one server, tests/test_queue_limits.py); ``CODITY_FAULT=no_refund`` does not touch these.
"""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.citus import CitusCluster
from tests.processes import Processes, wait_until
from tests.sqlapi import create_queue, one, row

pytestmark = pytest.mark.citus

Conn = psycopg.Connection[Any]


@pytest.fixture
def conn(citus_db_url: str) -> Iterator[Conn]:
    with psycopg.connect(citus_db_url, autocommit=True) as connection:
        yield connection


def _queues_on_both_nodes(
    cluster: CitusCluster, conn: Conn, names: list[str], **policy: Any
) -> dict[str, tuple[int, int]]:
    """Create the queues: each name's (queue id, port of its node); they must cover both
    worker nodes, or the test would not prove anything across nodes. Queue ids hash onto
    the shards, so when the ids drawn land on one node the queues are deleted and one more
    queue takes an id before they are made again."""
    workers = {w.port for w in cluster.workers}
    for attempt in range(20):
        queues = {}
        for name in names:
            queue = create_queue(conn, name, **policy)
            queues[name] = (queue, cluster.node_port_of(conn.info.dbname, "codity.jobs", queue))
        if {port for _, port in queues.values()} == workers:
            return queues
        for name in names:
            conn.execute("SELECT codity.delete_queue(%s, p_force => true)", [name])
        create_queue(conn, f"spacer-{attempt}")
    raise AssertionError(f"no ids spread the queues over both nodes: {queues}")


def _jobs(conn: Conn, queue: str, n: int, task: str = "t", payload: Any = None) -> None:
    conn.execute(
        "SELECT count(*) FROM codity.enqueue_many(%s, (SELECT jsonb_agg(jsonb_build_object("
        "'task', %s::text, 'payload', %s::jsonb)) FROM generate_series(1, %s)))",
        [queue, task, Jsonb(payload or {}), n],
    )


def _report(title: str, **figures: Any) -> None:
    print(f"\n[{title}] " + ", ".join(f"{k}={v}" for k, v in figures.items()))


# -- cron, exactly once ---------------------------------------------------------------------------

CRON_QUEUES = [f"cron-{n}" for n in range(8)]
SCHEDULES_PER_QUEUE = 5
DUPLICATES = (
    "SELECT schedule_id, run_at, count(*) FROM codity.jobs WHERE schedule_id IS NOT NULL"
    " GROUP BY 1, 2 HAVING count(*) > 1"
)


def _minutely_schedules(conn: Conn, now: datetime | None) -> int:
    """SCHEDULES_PER_QUEUE '* * * * *' schedules in each cron queue, created as of ``now``."""
    for queue in CRON_QUEUES:
        conn.execute(
            "SELECT codity.create_schedule(format('%%s-every-minute-%%s', %s::text, g), %s,"
            " '* * * * *', 't', p_now => coalesce(%s, now()))"
            " FROM generate_series(1, %s) AS g",
            [queue, queue, now, SCHEDULES_PER_QUEUE],
        )
    return len(CRON_QUEUES) * SCHEDULES_PER_QUEUE


def test_three_schedulers_ticking_across_minute_boundaries_create_each_cron_job_once(
    citus_cluster: CitusCluster, citus_db_url: str, conn: Conn
) -> None:
    """Three connections, released together at each of 14 steps of p_now (00:00:30 to
    00:03:45, each scheduler a millisecond apart), race for the same due schedules of
    queues on both nodes: every schedule gets exactly the minutes 00:01, 00:02, 00:03."""
    _queues_on_both_nodes(citus_cluster, conn, CRON_QUEUES)
    t0 = datetime(2031, 1, 1, 0, 0, 30, tzinfo=UTC)
    schedules = _minutely_schedules(conn, t0)
    steps = [t0 + timedelta(seconds=15 * k) for k in range(14)]
    barrier = threading.Barrier(3)
    created: Counter[int] = Counter()
    errors: list[BaseException] = []

    def scheduler(index: int) -> None:
        try:
            with psycopg.connect(citus_db_url, autocommit=True) as own:
                for step in steps:
                    barrier.wait(timeout=60)
                    now = step + timedelta(milliseconds=index)
                    created[index] += int(
                        one(own, "SELECT materialized FROM codity.tick(%s)", [now])
                    )
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=scheduler, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=180)
    assert not errors, errors
    minutes = [datetime(2031, 1, 1, 0, m, tzinfo=UTC) for m in (1, 2, 3)]
    _report("cron-ptime", schedules=schedules, jobs_by_scheduler=sorted(created.values()))

    assert sum(created.values()) == schedules * len(minutes)
    assert conn.execute(DUPLICATES).fetchall() == []
    runs = conn.execute(
        "SELECT schedule_id, array_agg(run_at ORDER BY run_at) FROM codity.jobs"
        " GROUP BY schedule_id"
    ).fetchall()
    assert len(runs) == schedules
    assert {tuple(r) for _, r in runs} == {tuple(minutes)}
    assert one(conn, "SELECT count(DISTINCT queue_id) FROM codity.jobs") == len(CRON_QUEUES)


def test_three_scheduler_processes_fire_each_overdue_schedule_once(
    citus_cluster: CitusCluster, citus_db_url: str, conn: Conn, tmp_path: Path
) -> None:
    """Real ``codity scheduler`` processes ticking every 0.2 s through the coordinator; 40
    schedules three minutes overdue appear in one commit: each fires exactly once for its
    overdue minute (the missed minutes after it do not fire), and they exit 0."""
    _queues_on_both_nodes(citus_cluster, conn, CRON_QUEUES)
    with Processes(tmp_path, citus_db_url) as procs:
        schedulers = [procs.scheduler(200, name=f"scheduler-{i}") for i in (1, 2, 3)]
        wait_until(
            lambda: (
                one(
                    conn,
                    "SELECT count(*) FROM pg_catalog.pg_stat_activity"
                    " WHERE application_name = 'codity-scheduler'"
                    " AND datname = current_database()",
                )
                == 3
            ),
            timeout=60,
            what="three schedulers connect",
            alive=schedulers,
        )
        with conn.transaction():
            overdue_from = one(conn, "SELECT now() - interval '3 minutes'")
            schedules = _minutely_schedules(conn, overdue_from)
        overdue, created_at = row(conn, "SELECT min(next_run_at), now() FROM codity.scheduled_jobs")
        wait_until(
            lambda: one(conn, "SELECT count(DISTINCT schedule_id) FROM codity.jobs") == schedules,
            timeout=60,
            what="every schedule fires",
            alive=schedulers,
        )
        for process in schedulers:
            process.send(signal.SIGTERM)
        codes = [p.wait(timeout=30) for p in schedulers]
    assert codes == [0, 0, 0]
    assert conn.execute(DUPLICATES).fetchall() == []
    assert one(conn, "SELECT count(*) FROM codity.jobs WHERE run_at = %s", [overdue]) == schedules
    assert (
        one(
            conn,
            "SELECT count(*) FROM codity.jobs WHERE run_at > %s AND run_at <= %s",
            [overdue, created_at],
        )
        == 0
    )
    later = one(conn, "SELECT count(*) FROM codity.jobs WHERE run_at > %s", [created_at])
    assert later in (0, schedules)


# -- retries, backoff, dead letters, replay ------------------------------------------------------

# The worker's three calls (codity.worker: claim.CLAIM_AND_START, reporter._FAIL and
# COMPLETE_MANY), each the call alone so that it is delegated, with time moved by p_now.
CLAIM_AT = (
    "SELECT c.job_id, c.fence, c.attempt FROM codity.claim_in_queue(%s, %s, 1, true,"
    " p_start => true, p_now => %s) AS c"
)
FAIL_AT = (
    "SELECT f.accepted, f.outcome::text, f.job_status::text, f.retry_at"
    " FROM codity.fail_in_queue(%s, %s, %s, %s, true, p_now => %s) AS f"
)
COMPLETE_AT = (
    "SELECT c.job_id, c.accepted, c.outcome::text FROM codity.complete_many_in_queue("
    "%s, %s::bigint[], %s::integer[], %s::jsonb[], p_now => %s, p_durable => false) AS c"
)


def test_retries_back_off_then_dead_letter_and_the_replay_runs_on_each_node(
    citus_cluster: CitusCluster, conn: Conn
) -> None:
    """On a queue of each node (3 attempts, exponential backoff from 1 s, at most 1.5 s):
    the worker's claim and failure, delegated to the node, with time moved by p_now. Each
    retry is due within its clamped delay and no sooner than the failure; promote queues
    it; the third failure dead-letters the job with payload, reason and error; the
    replay makes a new queued job in the same queue, which the worker's completion ends."""
    policy = {"max_attempts": 3, "backoff": "exponential", "base_delay_ms": 1000}
    queues = _queues_on_both_nodes(
        citus_cluster, conn, ["retry-a", "retry-b", "retry-c"], **policy, max_delay_ms=1500
    )
    names = list(queues)
    worker = one(conn, "SELECT codity.register_worker('w', %s)", [names])
    clamped = [timedelta(seconds=1), timedelta(seconds=1.5)]
    for name, (queue, _) in queues.items():
        [job] = [
            r[0]
            for r in conn.execute(
                "SELECT job_id FROM codity.enqueue_many(%s, %s)",
                [name, Jsonb([{"task": "import", "payload": {"file": f"{name}.csv"}}])],
            )
        ]
        t = one(conn, "SELECT now() + interval '1 minute'")
        for attempt in (1, 2, 3):
            claimed = conn.execute(CLAIM_AT, [queue, worker, t]).fetchall()
            assert claimed == [(job, attempt, attempt)], (name, attempt, claimed)
            accepted, outcome, status, retry_at = row(
                conn, FAIL_AT, [queue, job, attempt, f"bad row {attempt}", t]
            )
            assert (accepted, outcome) == (True, "applied")
            if attempt < 3:
                assert status == "scheduled"
                assert retry_at == one(
                    conn, "SELECT run_at FROM codity.jobs WHERE queue_id = %s AND id = %s",
                    [queue, job],
                )  # fmt: skip
                assert t <= retry_at <= t + clamped[attempt - 1], (attempt, retry_at - t)
                assert conn.execute(CLAIM_AT, [queue, worker, t]).fetchall() == []
                assert one(conn, "SELECT codity.promote(%s)", [retry_at]) == 1
                assert one(
                    conn, "SELECT status::text FROM codity.jobs WHERE queue_id = %s AND id = %s",
                    [queue, job],
                ) == "queued"  # fmt: skip
                t = retry_at
            else:
                assert status == "dead_letter"
        dead_id, payload, reason, error, attempts, dead_at = row(
            conn,
            "SELECT id, payload, reason, error, attempts, dead_at FROM codity.dead_letters"
            " WHERE queue_id = %s AND job_id = %s",
            [queue, job],
        )
        assert (payload, reason, error, attempts, dead_at) == (
            {"file": f"{name}.csv"},
            "failed: max attempts reached (3/3)",
            "bad row 3",
            3,
            t,
        )
        executions = conn.execute(
            "SELECT attempt, status::text FROM codity.job_executions"
            " WHERE queue_id = %s AND job_id = %s ORDER BY execution_seq",
            [queue, job],
        ).fetchall()
        assert executions == [(1, "failed"), (2, "failed"), (3, "failed")]

        replayed, replayed_status = row(
            conn, "SELECT job_id, job_status::text FROM codity.replay_dead_letter(%s)", [dead_id]
        )
        # The job still exists: it is the one requeued, its attempts reset (a deleted job
        # would be enqueued anew from the letter's copy).
        assert (replayed, replayed_status) == (job, "queued")
        later = one(conn, "SELECT now() + interval '2 minutes'")
        [(again, fence, attempt)] = conn.execute(CLAIM_AT, [queue, worker, later]).fetchall()
        assert (again, fence, attempt) == (job, 4, 1)
        done = conn.execute(
            COMPLETE_AT, [queue, [again], [fence], [Jsonb({"rows": 7})], later]
        ).fetchall()
        assert done == [(again, True, "applied")]
        assert one(
            conn, "SELECT status::text FROM codity.jobs WHERE queue_id = %s AND id = %s",
            [queue, job],
        ) == "completed"  # fmt: skip
        assert conn.execute(
            "SELECT attempt, status::text, result FROM codity.job_executions"
            " WHERE queue_id = %s AND job_id = %s ORDER BY execution_seq",
            [queue, job],
        ).fetchall() == [(1, "failed", None), (2, "failed", None), (3, "failed", None),
                         (1, "completed", {"rows": 7})]  # fmt: skip
        assert (
            one(conn, "SELECT replayed_job_id FROM codity.dead_letters WHERE id = %s", [dead_id])
            == replayed
        )


# -- pause and resume -----------------------------------------------------------------------------


FENCE_CHANNEL = "codity_test_fence"


def _notifications(listener: Conn, conn: Conn) -> list[str]:
    """Payloads on codity_v1 committed so far and not yet read: everything before a fence
    notification sent now (delivered in commit order)."""
    conn.execute(f"NOTIFY {FENCE_CHANNEL}")
    payloads: list[str] = []
    for notify in listener.notifies(timeout=30):
        if notify.channel == FENCE_CHANNEL:
            return payloads
        payloads.append(notify.payload)
    raise AssertionError("the fence notification never arrived")


def test_pausing_a_queue_on_one_node_stops_only_its_claims_and_resume_wakes_it(
    citus_cluster: CitusCluster, citus_db_url: str, conn: Conn
) -> None:
    queues = _queues_on_both_nodes(citus_cluster, conn, ["paused", "busy"])
    (paused, _), (busy, _) = queues["paused"], queues["busy"]
    worker = one(conn, "SELECT codity.register_worker('w', ARRAY['paused', 'busy'])")
    _jobs(conn, "paused", 3)
    _jobs(conn, "busy", 3)
    claim = "SELECT c.job_id FROM codity.claim_in_queue(%s, %s, 10, true, p_start => true) AS c"
    with psycopg.connect(citus_db_url, autocommit=True) as listener:
        listener.execute(f"LISTEN codity_v1; LISTEN {FENCE_CHANNEL}")
        assert one(conn, "SELECT codity.pause_queue('paused')") is True

        assert conn.execute(claim, [paused, worker]).fetchall() == []
        assert len(conn.execute(claim, [busy, worker]).fetchall()) == 3
        _jobs(conn, "paused", 2)  # enqueue into a paused queue works, and wakes nobody
        _jobs(conn, "busy", 1)  # the other node's queue still wakes its workers
        assert _notifications(listener, conn) == [str(busy)]
        assert one(
            conn, "SELECT count(*) FROM codity.jobs WHERE queue_id = %s AND status = 'queued'",
            [paused],
        ) == 5  # fmt: skip
        assert one(conn, "SELECT codity.resume_queue('paused')") is True
        assert _notifications(listener, conn) == [str(paused)]
    assert len(conn.execute(claim, [paused, worker]).fetchall()) == 5


# -- limits, exact across nodes ------------------------------------------------------------------


WORKER = ["worker", "--app", "tests.fault_tasks:registry"]


def _deepest(intervals: list[tuple[float, float]]) -> int:
    """How many of the intervals overlap at once, at most (an end before a start at the
    same instant)."""
    events = sorted([(b, 1) for b, _ in intervals] + [(e, -1) for _, e in intervals])
    depth = deepest = 0
    for _, step in events:
        depth += step
        deepest = max(deepest, depth)
    return deepest


def test_max_running_holds_in_each_of_two_queues_on_two_nodes_at_once(
    citus_cluster: CitusCluster, citus_db_url: str, conn: Conn, tmp_path: Path
) -> None:
    """Three workers (concurrency 2, no prefetch: six slots) serve two queues limited to 2
    each, on different nodes, 30 jobs of 50 ms in each. Per queue the handlers' own
    intervals never overlap 3 deep, and do reach 2; sampled, no queue ever has 3 jobs
    claimed or running."""
    limit, jobs = 2, 30
    queues = _queues_on_both_nodes(citus_cluster, conn, ["lim-a", "lim-b"], max_running=limit)
    for name in queues:
        _jobs(conn, name, jobs, task="fault.timed", payload={"seconds": 0.05})
    samples: dict[int, list[int]] = {q: [] for q, _ in queues.values()}
    with Processes(tmp_path, citus_db_url, WORKER_PREFETCH="0") as procs:
        workers = [
            procs.start(
                f"w{n}",
                [*WORKER, "--concurrency", "2", "--queue", "lim-a", "--queue", "lim-b"],
            )
            for n in range(3)
        ]

        def done() -> bool:
            for queue in samples:
                samples[queue].append(
                    int(
                        one(
                            conn,
                            "SELECT count(*) FROM codity.jobs WHERE queue_id = %s"
                            " AND status IN ('claimed', 'running')",
                            [queue],
                        )
                    )
                )
            finished = one(conn, "SELECT count(*) FROM codity.jobs WHERE status = 'completed'")
            return bool(finished == 2 * jobs)

        wait_until(done, timeout=120, interval=0.02, what="every job completed", alive=workers)
    deepest = {}
    for queue in samples:
        intervals = [
            (float(b), float(e))
            for b, e in conn.execute(
                "SELECT (result ->> 'began')::float8, (result ->> 'ended')::float8"
                " FROM codity.job_executions WHERE queue_id = %s AND status = 'completed'",
                [queue],
            )
        ]
        assert len(intervals) == jobs
        deepest[queue] = _deepest(intervals)
    both = _deepest(
        [
            (float(b), float(e))
            for b, e in conn.execute(
                "SELECT (result ->> 'began')::float8, (result ->> 'ended')::float8"
                " FROM codity.job_executions"
            )
        ]
    )
    _report(
        "max-running",
        deepest_per_queue=deepest,
        deepest_both=both,
        samples=sum(len(s) for s in samples.values()),
    )
    assert all(len(s) > 20 for s in samples.values())
    assert {q: max(s) for q, s in samples.items()} == dict.fromkeys(samples, limit)
    assert deepest == dict.fromkeys(samples, limit)
    assert both > limit, "the two queues ran at once: the limits are per queue, not global"


def test_rate_limits_hold_in_each_of_two_queues_on_two_nodes_at_once(
    citus_cluster: CitusCluster, citus_db_url: str, conn: Conn, tmp_path: Path
) -> None:
    """Three workers serve two queues of 10 claims a second each, on different nodes, 30
    jobs in each: no one-second window of the database's clock holds more than 10 claims of
    a queue, both queues claim in the same windows, and the workers keep claiming as the
    windows open (about three windows, not a poll interval each)."""
    rate, jobs = 10, 30
    queues = _queues_on_both_nodes(
        citus_cluster, conn, ["rate-a", "rate-b"], rate_limit=rate, rate_period_seconds=1
    )
    for name in queues:
        _jobs(conn, name, jobs, task="fault.timed", payload={"seconds": 0})
    began = time.monotonic()
    with Processes(tmp_path, citus_db_url, WORKER_POLL_INTERVAL_MS="30000") as procs:
        workers = [
            procs.start(
                f"w{n}",
                [*WORKER, "--concurrency", "5", "--queue", "rate-a", "--queue", "rate-b"],
            )
            for n in range(3)
        ]
        wait_until(
            lambda: (
                one(conn, "SELECT count(*) FROM codity.jobs WHERE status = 'completed'") == 2 * jobs
            ),
            timeout=60,
            what="every job completed",
            alive=workers,
        )
    windows = Counter(
        (int(q), w)
        for q, w in conn.execute(
            "SELECT queue_id, date_bin('1 second', claimed_at, timestamptz 'epoch')"
            " FROM codity.job_executions"
        )
    )
    spans = dict(
        conn.execute(
            "SELECT queue_id, extract(epoch FROM max(claimed_at) - min(claimed_at))"
            " FROM codity.job_executions GROUP BY 1"
        ).fetchall()
    )
    shared = {w for q, w in windows if q == queues["rate-a"][0]} & {
        w for q, w in windows if q == queues["rate-b"][0]
    }
    _report(
        "rate",
        busiest_window=max(windows.values()),
        windows=len(windows),
        spans_s={q: round(float(s), 2) for q, s in spans.items()},
        wall_s=round(time.monotonic() - began, 1),
    )
    assert sum(windows.values()) == 2 * jobs
    assert max(windows.values()) <= rate
    assert len(shared) >= 2, "both queues were claimed from in the same windows"
    assert all(float(s) < 8 for s in spans.values()), spans


def test_old_fence_rejections_are_pruned_and_counted_on_the_cluster(conn: Conn) -> None:
    """codity.prune_housekeeping on Citus: the rejections (a reference table) older than 30
    days go, counted into fence_rejection_totals (a reference table too, keyed with NULLS
    NOT DISTINCT) in the same distributed transaction; rows plus totals stay the same."""
    queue = create_queue(conn, "rejected")
    project = one(conn, "SELECT project_id FROM codity.queues WHERE id = %s", [queue])
    old = datetime.now(UTC) - timedelta(days=40)
    for q, p in ((queue, project), (queue, project), (None, None)):
        conn.execute(
            "INSERT INTO codity.fence_rejections (job_id, queue_id, project_id, call,"
            " presented_fence, rejected_at) VALUES (1, %s, %s, 'complete', 1, %s)",
            [q, p, old],
        )
    assert row(conn, "SELECT * FROM codity.prune_housekeeping()")[2] == 3
    assert one(conn, "SELECT count(*) FROM codity.fence_rejections") == 0
    totals = conn.execute(
        "SELECT project_id, queue_id, rejections FROM codity.fence_rejection_totals"
        " ORDER BY project_id NULLS FIRST"
    ).fetchall()
    assert totals == [(None, None, 1), (project, queue, 2)]
