"""Claim cost as the backlog grows: ``codity.claim(worker, queue, 10)`` at two queue sizes.

The jobs are loaded the way docs/EXPLAIN.md loads them (codity.explain.load_jobs: one
``INSERT ... SELECT generate_series``, mixed priorities, run_at spread over an hour, one
job in twenty not yet due), all in one queue, then ``VACUUM ANALYZE``. Each sample is one
call timed inside the server (``clock_timestamp()`` around it, in a temporary PL/pgSQL
function), so neither the network nor the client is counted, in a transaction that is
rolled back: the queue never shrinks and every sample claims the same ten jobs' worth of
work from the same backlog.
"""

from __future__ import annotations

from typing import Any

import psycopg

from codity.bench._model import ClaimCost
from codity.bench._throughput import reset_jobs
from codity.bench._workers import BenchError
from codity.explain import load_jobs

__all__ = ["LIMIT", "TIMED_CLAIM", "claim_costs"]

Conn = psycopg.Connection[Any]
LIMIT = 10
WARMUP = 10
QUEUE = "explain-0"  # the queue load_jobs(queues=1) fills
TIMED_CLAIM = """
CREATE FUNCTION pg_temp.bench_claim_ms(p_worker bigint, p_queue text, p_limit integer,
                                       p_exact boolean)
RETURNS double precision
LANGUAGE plpgsql
AS $$
DECLARE
    v_start timestamptz := pg_catalog.clock_timestamp();
    v_claimed bigint;
BEGIN
    SELECT count(*) INTO v_claimed FROM codity.claim(p_worker, p_queue, p_limit);
    IF p_exact AND v_claimed <> p_limit THEN
        RAISE EXCEPTION 'claimed % jobs, expected %', v_claimed, p_limit;
    END IF;
    RETURN EXTRACT(epoch FROM pg_catalog.clock_timestamp() - v_start) * 1000;
END;
$$
"""
"""``pg_temp.bench_claim_ms(worker, queue, limit, exact)``: one claim timed inside the
server; with ``exact`` it fails unless it claimed ``limit`` jobs (codity soak's nearly empty
queue claims what there is)."""


def _sample(conn: Conn, worker_id: int, runs: int) -> tuple[float, ...]:
    query = "SELECT pg_temp.bench_claim_ms(%s, %s, %s, true)"
    samples = []
    for n in range(WARMUP + runs):
        with conn.transaction(force_rollback=True):
            row = conn.execute(query, [worker_id, QUEUE, LIMIT]).fetchone()
        assert row is not None
        if n >= WARMUP:
            samples.append(float(row[0]))
    return tuple(samples)


def claim_costs(conn: Conn, sizes: tuple[int, int], runs: int) -> tuple[ClaimCost, ClaimCost]:
    """The claim's server-side time with ``sizes[0]`` and then ``sizes[1]`` jobs queued."""
    small, large = sizes
    if not 0 < small < large:
        raise BenchError(f"claim sizes must grow: {sizes}")
    reset_jobs(conn)
    load_jobs(conn, small, queues=1)
    conn.execute("VACUUM ANALYZE codity.jobs")
    worker = conn.execute("SELECT codity.register_worker('bench-claim', ARRAY[%s])", [QUEUE])
    worker_id = int(worker.fetchall()[0][0])
    conn.execute(TIMED_CLAIM)
    first = ClaimCost(small, LIMIT, _sample(conn, worker_id, runs))
    load_jobs(conn, large - small, queues=1)
    conn.execute("VACUUM ANALYZE codity.jobs")
    second = ClaimCost(large, LIMIT, _sample(conn, worker_id, runs))
    queued = conn.execute("SELECT count(*) FROM codity.jobs WHERE status = 'queued'").fetchone()
    if queued is None or queued[0] != large:
        raise BenchError(f"expected {large} queued jobs, found {queued}")
    return first, second
