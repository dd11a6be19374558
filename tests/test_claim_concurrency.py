"""No job is ever handed to two workers: the seed's concurrency proof, on a real PostgreSQL.

N claim loops, each on its own connection and thread and each its own registered worker,
are released together by a barrier and drain one queue through the worker protocol
(claim, start, complete) until it is empty. Two independent detectors then look for a job
handed out twice:

- client side: a Counter of every job id any loop was handed;
- database side: jobs whose attempt is not 1, jobs with more than one execution row, and
  the highest execution_seq (the fence), which must be 1 everywhere.

``run_claim_storm`` is the harness; tests/test_faults_detected.py runs it against the
``naive_claim`` fault and asserts that it does see duplicates there.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import psycopg
import pytest

__all__ = ["ClaimStorm", "assert_no_job_handed_out_twice", "enqueue_jobs", "run_claim_storm"]

QUEUE = "storm"
ENQUEUE_BATCH = 1000


@dataclass
class _Loop:
    """What one claim loop saw; written by its own thread only."""

    name: str
    worker_id: int = 0
    claimed: list[int] = field(default_factory=list)
    rejected: int = 0
    errors: list[str] = field(default_factory=list)
    gave_up: bool = False


@dataclass(frozen=True)
class ClaimStorm:
    """The outcome of a claim storm, from both detectors."""

    jobs: int
    loops: int
    seconds: float
    claims_per_job: Counter[int]
    per_worker: dict[int, int]
    rejected_calls: int
    errors: list[str]
    loops_gave_up: int
    db_attempt_not_one: int
    db_jobs_with_several_executions: int
    db_fence_rejections: int
    db_max_execution_seq: int
    db_left_queued: int
    db_completed: int

    @property
    def handed_out(self) -> int:
        return sum(self.claims_per_job.values())

    @property
    def duplicates(self) -> int:
        return self.handed_out - len(self.claims_per_job)

    @property
    def most_claims_of_one_job(self) -> int:
        return max(self.claims_per_job.values(), default=0)

    def report(self) -> str:
        distribution = " ".join(str(n) for n in self.per_worker.values())
        lines = [
            f"{self.jobs} queued jobs · {self.loops} concurrent claim loops · {self.seconds:.1f} s",
            f"  handed out          {self.handed_out:>6}",
            f"  distinct jobs       {len(self.claims_per_job):>6}",
            f"  claimed twice+      {self.duplicates:>6}   (most claims of one job: "
            f"{self.most_claims_of_one_job})",
            f"  distinct worker_ids {sum(1 for n in self.per_worker.values() if n):>6}",
            f"  left in 'queued'    {self.db_left_queued:>6}",
            f"  completed           {self.db_completed:>6}",
            f"  db: attempt <> 1    {self.db_attempt_not_one:>6}",
            f"  db: >1 execution    {self.db_jobs_with_several_executions:>6}",
            f"  db: fence rejected  {self.db_fence_rejections:>6}",
            f"  db: max fence       {self.db_max_execution_seq:>6}",
            f"  stale-fence refusals {self.rejected_calls:>5}",
            f"  errors              {len(self.errors):>6}",
            f"  distribution: {distribution}",
        ]
        lines.extend(f"  error: {e}" for e in sorted(set(self.errors))[:5])
        return "\n".join(lines)


def enqueue_jobs(conn: psycopg.Connection, queue: str, count: int) -> None:
    """Enqueue ``count`` jobs into ``queue`` with codity.enqueue_many, 1000 per call."""
    for first in range(0, count, ENQUEUE_BATCH):
        last = min(first + ENQUEUE_BATCH, count) - 1
        conn.execute(
            """
            SELECT count(*) FROM codity.enqueue_many(
                %s,
                (SELECT jsonb_agg(jsonb_build_object('task', 'storm.noop',
                                                     'payload', jsonb_build_object('n', g)))
                 FROM generate_series(%s::integer, %s::integer) AS g))
            """,
            [queue, first, last],
        )


def _claim_loop(
    url: str,
    queue: str,
    loop: _Loop,
    barrier: threading.Barrier,
    limits: tuple[int, int],
    max_rounds: int,
) -> None:
    rng = random.Random(loop.name)
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT codity.register_worker(%s, ARRAY[%s]::text[])", [loop.name, queue]
        ).fetchone()
        assert row is not None
        loop.worker_id = int(row[0])
        barrier.wait(timeout=60)
        for _ in range(max_rounds):
            limit = rng.randint(*limits)
            try:
                rows = conn.execute(
                    "SELECT job_id, fence FROM codity.claim(%s, %s, %s)",
                    [loop.worker_id, queue, limit],
                ).fetchall()
            except psycopg.Error as exc:
                loop.errors.append(f"claim: {exc.sqlstate} {exc}".splitlines()[0])
                continue
            if not rows:
                return
            for job_id, fence in rows:
                loop.claimed.append(job_id)
                for call in ("start", "complete"):
                    try:
                        accepted = conn.execute(
                            f"SELECT accepted FROM codity.{call}(%s, %s)", [job_id, fence]
                        ).fetchone()
                    except psycopg.Error as exc:
                        loop.errors.append(f"{call}: {exc.sqlstate} {exc}".splitlines()[0])
                        break
                    if accepted is None or not accepted[0]:
                        loop.rejected += 1
                        break
        loop.gave_up = True


def run_claim_storm(
    url: str, *, jobs: int, loops: int, limits: tuple[int, int] = (1, 1)
) -> ClaimStorm:
    """Enqueue ``jobs`` jobs, drain them with ``loops`` concurrent claim loops, and count.

    Each claim asks for a random limit within ``limits`` (inclusive). A loop stops when a
    claim returns nothing; errors are recorded, not raised, so a broken claim is measured
    rather than merely crashing the harness.
    """
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT * FROM codity.create_queue(%s)", [QUEUE])
        enqueue_jobs(conn, QUEUE, jobs)

    barrier = threading.Barrier(loops)
    states = [_Loop(name=f"storm-{i:02d}") for i in range(loops)]
    max_rounds = 3 * jobs + 100
    threads = [
        threading.Thread(
            target=_claim_loop,
            args=(url, QUEUE, state, barrier, limits, max_rounds),
            name=state.name,
        )
        for state in states
    ]
    began = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
        assert not thread.is_alive(), f"claim loop {thread.name} did not finish"
    seconds = time.monotonic() - began

    with psycopg.connect(url, autocommit=True) as conn:
        db = conn.execute(
            """
            SELECT count(*) FILTER (WHERE j.attempt <> 1),
                   count(*) FILTER (WHERE j.status = 'queued'),
                   count(*) FILTER (WHERE j.status = 'completed'),
                   coalesce(max(j.execution_seq), 0),
                   (SELECT count(*) FROM (
                        SELECT x.job_id FROM codity.job_executions x
                        JOIN codity.jobs j2 ON j2.id = x.job_id
                        JOIN codity.queues q2 ON q2.id = j2.queue_id
                        WHERE q2.name = %(queue)s
                        GROUP BY x.job_id HAVING count(*) > 1) AS several),
                   (SELECT count(*) FROM codity.fence_rejections r
                    JOIN codity.queues q3 ON q3.id = r.queue_id WHERE q3.name = %(queue)s)
            FROM codity.jobs j JOIN codity.queues q ON q.id = j.queue_id
            WHERE q.name = %(queue)s
            """,
            {"queue": QUEUE},
        ).fetchone()
    assert db is not None
    return ClaimStorm(
        jobs=jobs,
        loops=loops,
        seconds=seconds,
        claims_per_job=Counter(job for state in states for job in state.claimed),
        per_worker={state.worker_id: len(state.claimed) for state in states},
        rejected_calls=sum(state.rejected for state in states),
        errors=[e for state in states for e in state.errors],
        loops_gave_up=sum(state.gave_up for state in states),
        db_attempt_not_one=db[0],
        db_left_queued=db[1],
        db_completed=db[2],
        db_max_execution_seq=db[3],
        db_jobs_with_several_executions=db[4],
        db_fence_rejections=db[5],
    )


def assert_no_job_handed_out_twice(storm: ClaimStorm) -> None:
    """Both detectors agree: every job was handed out exactly once, and completed."""
    report = storm.report()
    # Client side: the Counter of job ids across all threads.
    assert storm.duplicates == 0, report
    assert storm.most_claims_of_one_job == 1, report
    assert storm.handed_out == storm.jobs, report
    # Database side: attempt, executions and fence, counted independently of the client.
    assert storm.db_attempt_not_one == 0, report
    assert storm.db_jobs_with_several_executions == 0, report
    assert storm.db_fence_rejections == 0, report
    assert storm.db_max_execution_seq == 1, report
    assert storm.db_left_queued == 0, report
    assert storm.db_completed == storm.jobs, report
    # And nothing else went wrong on the way.
    assert storm.rejected_calls == 0, report
    assert storm.errors == [], report
    assert storm.loops_gave_up == 0, report


def test_thousand_jobs_ten_claim_loops_never_hand_a_job_out_twice(db_url: str) -> None:
    storm = run_claim_storm(db_url, jobs=1000, loops=10)
    print("\n" + storm.report())
    assert_no_job_handed_out_twice(storm)
    # Every loop gets work: the queue takes seconds to drain and all start at the barrier.
    assert len(storm.per_worker) == 10
    assert all(count > 0 for count in storm.per_worker.values()), storm.per_worker


# About 6 s: `slow`, run by CI (.ci/run); the 1,000-job storm above is the default run's.
@pytest.mark.slow
def test_ten_thousand_jobs_twenty_batch_claim_loops_never_hand_a_job_out_twice(db_url: str) -> None:
    storm = run_claim_storm(db_url, jobs=10_000, loops=20, limits=(10, 50))
    print("\n" + storm.report())
    assert_no_job_handed_out_twice(storm)
    assert len(storm.per_worker) == 20
    assert all(count > 0 for count in storm.per_worker.values()), storm.per_worker
