"""PGQueuer's side of ``codity bench --against pgqueuer``: its workers and its producer.

This file runs only under the Python of the bench's own PGQueuer environment
(``.codity/bench/pgqueuer-venv``; PGQueuer is a bench-only dependency, never Codity's),
copied into the run's scratch folder. Codity never imports it; it imports only PGQueuer,
asyncpg and the standard library.

Run as a script, it is one of three things::

    python pgqueuer_worker.py work --batch-size B [--max-concurrent-tasks M]
    python pgqueuer_worker.py enqueue --jobs N --batch B    prints {"seconds": ...}
    python pgqueuer_worker.py pickup --samples N            prints {"samples": [[id, sent, acked]]}

``work`` is a PGQueuer worker started the way ``pgq run pgqueuer_worker:create_worker``
starts one: ``pgqueuer.run`` (the supervisor behind ``pgq run``: SIGTERM handling, the
factory) on uvloop, logging at INFO. It does not go through the ``pgq run`` command
itself because PGQueuer 1.6.0's command fails before starting with the typer release
pip installs beside it (``--log-level`` reaches the logger as a string:
``AttributeError: 'str' object has no attribute 'name'``). The factory registers the two
entrypoints, connects, then waits at a start line: it creates the file named by
``BENCH_READY`` and waits for the one named by ``BENCH_GO``, so that every process begins
dequeuing together, as Codity's workers do when their paused queue is resumed. The pickup
handler appends ``job_id start_time`` to the file named by ``BENCH_STARTS``.

``enqueue`` and ``pickup`` are PGQueuer's own client enqueuing (``Queries.enqueue``, one
asyncpg connection), one by one, in batches, or one at a time with gaps for pickup latency.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import IO, Any

import asyncpg  # type: ignore[import-not-found, unused-ignore]
import pgqueuer  # type: ignore[import-not-found, unused-ignore]
from pgqueuer import PgQueuer  # type: ignore[import-not-found, unused-ignore]
from pgqueuer.core import logconfig  # type: ignore[import-not-found, unused-ignore]
from pgqueuer.db import AsyncpgDriver  # type: ignore[import-not-found, unused-ignore]
from pgqueuer.queries import Queries  # type: ignore[import-not-found, unused-ignore]

NOOP = "bench_noop"
PICKUP = "bench_pickup"
_GAP_S = (0.010, 0.050)
"""Between pickup samples, as codity.bench._latency spaces Codity's."""


async def _noop(job: Any) -> None:
    """The drained job: nothing, so that only the queue's own cost is measured."""


def _pickup_handler(starts: IO[str] | None) -> Callable[[Any], Awaitable[None]]:
    async def pickup(job: Any) -> None:
        started = time.time()
        if starts is not None:
            starts.write(f"{job.id} {started!r}\n")
            starts.flush()

    return pickup


async def _start_line() -> None:
    """Say ready, then wait for the harness to let every worker go at once."""
    ready, go = os.environ.get("BENCH_READY"), os.environ.get("BENCH_GO")
    if ready:
        Path(ready).touch()
    while go and not Path(go).exists():
        await asyncio.sleep(0.002)


@asynccontextmanager
async def create_worker() -> AsyncIterator[Any]:
    """The factory ``pgq run`` calls: a PgQueuer on one asyncpg connection (PGDSN)."""
    starts_path = os.environ.get("BENCH_STARTS")
    with contextlib.ExitStack() as files:
        starts = files.enter_context(Path(starts_path).open("a")) if starts_path else None
        connection = await asyncpg.connect(os.environ["PGDSN"])
        try:
            pgq = PgQueuer(AsyncpgDriver(connection))
            pgq.entrypoint(NOOP)(_noop)
            pgq.entrypoint(PICKUP)(_pickup_handler(starts))
            await _start_line()
            yield pgq
        finally:
            await connection.close()


async def _enqueue(queries: Any, jobs: int, batch: int) -> dict[str, float]:
    start = time.perf_counter()
    if batch == 1:
        for _ in range(jobs):
            await queries.enqueue(NOOP, None)
    else:
        for done in range(0, jobs, batch):
            size = min(batch, jobs - done)
            ids = await queries.enqueue([NOOP] * size, [None] * size, [0] * size)
            if len(ids) != size:
                raise RuntimeError(f"enqueue returned {len(ids)} ids for {size} jobs")
    return {"seconds": time.perf_counter() - start}


async def _pickup(queries: Any, samples: int) -> dict[str, list[list[float]]]:
    rng = random.Random(42)
    found = []
    for _ in range(samples):
        sent = time.time()
        ids = await queries.enqueue(PICKUP, None)
        acked = time.time()
        found.append([float(ids[0]), sent, acked])
        await asyncio.sleep(rng.uniform(*_GAP_S))
    return {"samples": found}


async def _client(args: argparse.Namespace) -> dict[str, Any]:
    connection = await asyncpg.connect(os.environ["PGDSN"])
    try:
        queries = Queries(AsyncpgDriver(connection))
        if args.command == "enqueue":
            return await _enqueue(queries, args.jobs, args.batch)
        return await _pickup(queries, args.samples)
    finally:
        await connection.close()


def _work(args: argparse.Namespace) -> None:
    """What ``pgq run pgqueuer_worker:create_worker --batch-size B ...`` does."""
    logconfig.setup_fancy_logger(logconfig.LogLevel.INFO)
    run = pgqueuer.run(
        create_worker, batch_size=args.batch_size, max_concurrent_tasks=args.max_concurrent_tasks
    )
    try:
        import uvloop  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        asyncio.run(run)
    else:
        uvloop.run(run)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    work = sub.add_parser("work")
    work.add_argument("--batch-size", type=int, default=10)
    work.add_argument("--max-concurrent-tasks", type=int)
    enqueue = sub.add_parser("enqueue")
    enqueue.add_argument("--jobs", type=int, required=True)
    enqueue.add_argument("--batch", type=int, required=True)
    pickup = sub.add_parser("pickup")
    pickup.add_argument("--samples", type=int, required=True)
    args = parser.parse_args()
    if args.command == "work":
        _work(args)
    else:
        print(json.dumps(asyncio.run(_client(args))))


if __name__ == "__main__":
    main()
