"""Pickup latency: from the enqueue's COMMIT to the first line of the handler.

One idle worker process serves a queue of its own. The bench enqueues one job at a time
with ``codity.enqueue`` on an autocommit connection, reads ``time.time()`` as soon as the
call returns (the COMMIT has been acknowledged), and waits a small random gap. The handler
(codity.bench.tasks) returns its own ``time.time()`` as the job's result, which
``codity.complete_many`` stores in ``job_executions.result``. Both read the same system
clock. Two parts are recorded beside the total: the time to the start of the worker's
claim statement (the execution's ``claimed_at``, the statement's ``now()``, on the same
clock), and the enqueue's own round trip, a commit whose WAL flush the claim pays too.

With notifications off (``--no-listen``) the gaps are stretched so that the samples span
several poll intervals. The diagnostic mode runs the worker with
``PGOPTIONS=-c synchronous_commit=off``: what pickup costs without waiting for the claim's
WAL flush (not a way to run: a claim lost in a crash could hand its fence out twice).
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import psycopg

from codity.bench._model import BenchOptions, Pickup
from codity.bench._workers import BenchError, WorkerProcesses
from codity.bench.tasks import PICKUP_TASK

__all__ = ["pickup"]

Conn = psycopg.Connection[Any]
_STARTED = """
SELECT x.job_id, (x.result ->> 'started')::double precision,
       EXTRACT(epoch FROM x.claimed_at)::double precision
FROM codity.job_executions x
WHERE x.job_id = ANY (%s) AND x.status = 'completed'
"""
_GAP_S = (0.010, 0.050)
_POLL_SPAN = 4
"""With polling, the samples cover about this many poll intervals."""


def _gaps(options: BenchOptions, listen: bool, rng: random.Random) -> list[float]:
    low, high = _GAP_S
    if not listen:
        span = _POLL_SPAN * options.poll_interval_ms / 1000
        mean = max((low + high) / 2, span / options.pickup_samples)
        low, high = mean / 2, mean * 1.5
    return [rng.uniform(low, high) for _ in range(options.pickup_samples)]


def pickup(
    url: str,
    conn: Conn,
    options: BenchOptions,
    *,
    listen: bool,
    log_dir: Path,
    synchronous_commit: bool = True,
) -> Pickup:
    queue = "pickup-" + ("notify" if listen else "poll") + ("" if synchronous_commit else "-async")
    conn.execute("SELECT codity.create_queue(%s)", [queue])
    rng = random.Random(42)
    enqueued: dict[int, tuple[float, float]] = {}
    env = {} if synchronous_commit else {"PGOPTIONS": "-c synchronous_commit=off"}
    with WorkerProcesses(
        url,
        app="codity.bench.tasks:registry",
        queue=queue,
        concurrency=options.concurrency,
        count=1,
        listen=listen,
        log_dir=log_dir,
        label=queue,
        env=env,
    ) as worker:
        worker.wait_ready(conn)
        time.sleep(0.5)  # the worker's first claim found nothing: it is idle, waiting
        query = "SELECT job_id FROM codity.enqueue(%s, %s)"
        for gap in _gaps(options, listen, rng):
            sent = time.time()
            row = conn.execute(query, [queue, PICKUP_TASK], prepare=True).fetchone()
            committed = time.time()
            assert row is not None
            enqueued[int(row[0])] = (sent, committed)
            time.sleep(gap)
        ids = list(enqueued)
        deadline = time.monotonic() + 30 + 3 * options.poll_interval_ms / 1000
        while True:
            found = {r[0]: (r[1], r[2]) for r in conn.execute(_STARTED, [ids]).fetchall()}
            if len(found) == len(ids):
                break
            if time.monotonic() > deadline:
                raise BenchError(
                    f"pickup: {len(ids) - len(found)} job(s) never completed\n" + worker.log_tail()
                )
            worker.check_alive()
            time.sleep(0.1)
        codes = worker.stop()
    if any(codes):
        raise BenchError(f"pickup: worker exit code {codes}\n{worker.log_tail()}")
    return Pickup(
        listen=listen,
        synchronous_commit=synchronous_commit,
        samples_ms=tuple((found[i][0] - enqueued[i][1]) * 1000 for i in ids),
        wake_ms=tuple((found[i][1] - enqueued[i][1]) * 1000 for i in ids),
        commit_ms=tuple((enqueued[i][1] - enqueued[i][0]) * 1000 for i in ids),
    )
