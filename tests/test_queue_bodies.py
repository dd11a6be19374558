"""The hot transitions by queue id (DESIGN.md, "Room to scale out", rule 1; migration 0016).

Each hot transition has a body that takes the queue's id first (claim_in_queue,
start_many_in_queue, complete_many_in_queue, fail_in_queue, release_in_queue,
extend_leases, reap_in_queue, enqueue_many_in_queue) and works on that queue alone; the
functions callers have always used are wrappers that find the queue and call it. Proved
here: a batch that spans queues is split by queue and answered in the order it was sent; a
body does not see another queue's job; the Python worker calls the bodies and never the
wrappers; and a client that sends its parameters untyped still gets the functions it
always got (the reason the bodies have names of their own).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg
from psycopg.rows import TupleRow

from codity.worker import JobContext, NonRetryable, Registry, Worker, WorkerConfig
from tests.processes import wait_until
from tests.sqlapi import NO_BACKOFF, create_queue, one, row

Conn = psycopg.Connection[TupleRow]


def _count_calls_from_new_sessions(conn: Conn) -> None:
    """track_functions = 'all' for sessions that connect from now on ('pl' would miss the
    wrappers by name and job id, which are SQL functions)."""
    conn.execute(
        psycopg.sql.SQL("ALTER DATABASE {} SET track_functions = 'all'").format(
            psycopg.sql.Identifier(str(one(conn, "SELECT current_database()")))
        )
    )


def _calls(conn: Conn) -> dict[str, int]:
    """Calls per codity function counted so far by sessions that have ended."""
    conn.execute("SELECT pg_catalog.pg_stat_clear_snapshot()")
    rows = conn.execute(
        "SELECT f.funcname, sum(f.calls)::bigint FROM pg_catalog.pg_stat_user_functions f"
        " WHERE f.schemaname = 'codity' GROUP BY 1"
    ).fetchall()
    return {name: int(calls) for name, calls in rows}


def _wait_for_other_sessions_to_end(conn: Conn) -> None:
    """Until no other client backend is connected to this database."""
    others = (
        "SELECT count(*) = 0 FROM pg_catalog.pg_stat_activity a"
        " WHERE a.datname = pg_catalog.current_database() AND a.backend_type = 'client backend'"
        " AND a.pid <> pg_catalog.pg_backend_pid()"
    )
    wait_until(lambda: one(conn, others), timeout=10, what="the worker's backends to exit")


def _two_queues_with_running_jobs(conn: Conn) -> tuple[int, dict[str, int], list[tuple[int, int]]]:
    """Queues a and b, a worker for both, and two running jobs in each: (worker, queue ids,
    [(job, fence)] as a1, a2, b1, b2)."""
    ids = {name: create_queue(conn, name) for name in ("a", "b")}
    worker = int(one(conn, "SELECT codity.register_worker('w', ARRAY['a', 'b'], 10)"))
    held: list[tuple[int, int]] = []
    for name in ("a", "b"):
        conn.execute(
            'SELECT codity.enqueue_many_in_queue(%s, \'[{"task": "t"}, {"task": "t"}]\')',
            [ids[name]],
        )
        held += conn.execute(
            "SELECT job_id, fence FROM codity.claim_in_queue(%s, %s, 2, p_start => true)",
            [ids[name], worker],
        ).fetchall()
    return worker, ids, held


def test_a_batch_across_queues_is_split_by_queue_and_answered_in_input_order(
    conn: Conn,
) -> None:
    worker, ids, held = _two_queues_with_running_jobs(conn)
    (a1, fa1), (a2, fa2), (b1, fb1), (b2, fb2) = held

    beats = conn.execute(
        "SELECT job_id, state FROM codity.heartbeat(%s, %s::bigint[], %s::integer[])",
        [worker, [b2, a2, 987654, b1], [fb2, fa2, 1, fb1]],
    ).fetchall()
    assert beats == [(b2, "extended"), (a2, "extended"), (987654, "lost"), (b1, "extended")]

    answers = conn.execute(
        "SELECT job_id, outcome::text FROM codity.complete_many(%s::bigint[], %s::integer[])",
        [[b1, a1, b2, a2, b1], [fb1, fa1, fb2 + 1, fa2, fb1]],
    ).fetchall()
    assert answers == [
        (b1, "applied"),
        (a1, "applied"),
        (b2, "stale"),
        (a2, "applied"),
        (b1, "already_applied"),
    ]
    executions = conn.execute(
        "SELECT job_id, queue_id FROM codity.job_executions ORDER BY job_id"
    ).fetchall()
    assert executions == [(a1, ids["a"]), (a2, ids["a"]), (b1, ids["b"])]


def test_a_body_does_not_see_a_job_of_another_queue(conn: Conn) -> None:
    """extend_leases in the wrong queue reports the job lost and touches nothing: no lease
    moved, no rejection recorded (the job was not found, so there is no fence to refuse)."""
    worker, ids, held = _two_queues_with_running_jobs(conn)
    job, fence = held[2]  # b1
    lease = one(conn, "SELECT lock_expires_at FROM codity.jobs WHERE id = %s", [job])

    beats = conn.execute(
        "SELECT state FROM codity.extend_leases(%s, %s, %s::bigint[], %s::integer[],"
        " p_now => now() + interval '10 seconds')",
        [ids["a"], worker, [job], [fence]],
    ).fetchall()
    assert beats == [("lost",)]
    assert row(
        conn, "SELECT status::text, lock_expires_at FROM codity.jobs WHERE id = %s", [job]
    ) == (
        "running",
        lease,
    )
    assert one(conn, "SELECT count(*) FROM codity.fence_rejections") == 0


def test_the_worker_calls_the_bodies_by_queue_id_and_never_the_wrappers(
    db_url: str, conn: Conn
) -> None:
    """Counted by PostgreSQL itself (track_functions) while a real worker serves two queues:
    claims, completions and failures all go through the bodies."""
    _count_calls_from_new_sessions(conn)
    for name in ("a", "b"):
        create_queue(conn, name, max_attempts=1, **NO_BACKOFF)
        conn.execute(
            "SELECT codity.enqueue_many(%s, %s)",
            [name, psycopg.types.json.Jsonb([{"task": "ok"}] * 10 + [{"task": "bad"}])],
        )
    registry = Registry()

    @registry.task("ok")
    async def ok(payload: Any, ctx: JobContext) -> dict[str, int]:
        return {"queue": ctx.queue_id}

    @registry.task("bad")
    async def bad(payload: Any, ctx: JobContext) -> None:
        raise NonRetryable("no")

    async def serve() -> None:
        stop = asyncio.Event()
        config = WorkerConfig(queues=("a", "b"), heartbeat_s=0.2, poll_s=0.5, grace_s=2.0)
        runner = asyncio.create_task(Worker(db_url, registry, config).run(stop))
        deadline = asyncio.get_running_loop().time() + 20
        while one(conn, "SELECT count(*) FROM codity.jobs WHERE finished_at IS NULL"):
            assert asyncio.get_running_loop().time() < deadline, "the worker did not finish"
            await asyncio.sleep(0.05)
        stop.set()
        await asyncio.wait_for(runner, timeout=10)

    asyncio.run(serve())

    # A session's counts reach the statistics when its backend exits, which may come after
    # the worker closed its connections: wait for the backends, not the client.
    _wait_for_other_sessions_to_end(conn)
    calls = _calls(conn)
    for body in ("claim_in_queue", "complete_many_in_queue", "fail_in_queue"):
        assert calls.get(body, 0) > 0, (body, calls)
    for wrapper in ("claim", "complete_many", "complete", "fail", "start_many", "start"):
        assert wrapper not in calls, (wrapper, calls)
    # Each completion went to the body of its own job's queue, as the handler saw it.
    assert row(
        conn,
        "SELECT count(*), count(*) FILTER (WHERE (x.result ->> 'queue')::bigint = x.queue_id)"
        " FROM codity.job_executions x WHERE x.status = 'completed'",
    ) == (20, 20)


def test_untyped_parameters_still_pick_the_functions_callers_always_used(conn: Conn) -> None:
    """Drivers such as node-postgres send every parameter untyped. Had the bodies been
    overloads of the same names, these calls would be 'not unique' (measured with the
    overloads in place: fail with 4 or 5 arguments, complete_many with 3 or 4, release
    with 3, enqueue_many with 3, reap with 1 or 2)."""
    calls = {
        "fail4": ("codity.fail($1, $2, $3, $4)", "{bigint,integer,text,boolean}"),
        "complete_many3": ("codity.complete_many($1, $2, $3)", "{bigint[],integer[],jsonb[]}"),
        "release3": (
            "codity.release($1, $2, $3)",
            '{bigint,integer,"timestamp with time zone"}',
        ),
        "enqueue_many3": ("codity.enqueue_many($1, $2, $3)", "{text,jsonb,bigint}"),
        "claim3": ("codity.claim($1, $2, $3)", "{bigint,text,integer}"),
        "reap1": ("codity.reap($1)", '{"timestamp with time zone"}'),
    }
    for name, (call, _) in calls.items():
        conn.execute(f"PREPARE untyped_{name} AS SELECT * FROM {call}".encode())
    got: dict[str, str] = dict(
        conn.execute(
            "SELECT substr(name, 9), parameter_types::text FROM pg_catalog.pg_prepared_statements"
            " WHERE name LIKE 'untyped\\_%'"
        ).fetchall()
    )
    assert got == {name: types for name, (_, types) in calls.items()}


def test_reap_visits_only_the_queues_with_an_expired_lease(conn: Conn) -> None:
    """tick runs reap() every second: visiting every queue cost 40 ms per tick with 500
    queues (measured); it lists the queues with an expired lease first. Counted calls."""
    _count_calls_from_new_sessions(conn)
    ids = [create_queue(conn, f"q{n}") for n in range(30)]
    worker = int(one(conn, "SELECT codity.register_worker('w', p_now => now())"))
    conn.execute('SELECT codity.enqueue_many_in_queue(%s, \'[{"task": "t"}]\')', [ids[7]])
    conn.execute("SELECT * FROM codity.claim_in_queue(%s, %s)", [ids[7], worker])
    with psycopg.connect(conn.info.dsn, autocommit=True) as counted:
        reaped = counted.execute(
            "SELECT queue_id, outcome FROM codity.reap(p_now => now() + interval '1 hour')"
        ).fetchall()
    assert reaped == [(ids[7], "requeued")]
    # An ended session's counts reach the shared statistics a moment after it closes.
    deadline = time.monotonic() + 10
    while not _calls(conn).get("reap") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _calls(conn).get("reap") == 1
    assert _calls(conn).get("reap_in_queue") == 1
