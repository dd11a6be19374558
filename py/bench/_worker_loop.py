"""The worker's loop as a pgbench script, and the pgbench to run it with.

Both ceilings (``codity bench``'s and ``codity bench --against pgqueuer``'s) drive the
engine with the worker's own two statements, verbatim: its claim
(codity.worker.claim.CLAIM_AND_START, which starts what it claims) and its completion batch
(codity.worker.reporter.COMPLETE_MANY, whose commit does not wait for its WAL), as two
transactions like the worker's, with no handler and no Python in between.
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from typing import Any

import psycopg

from codity.bench._workers import BenchError
from codity.db.embedded import EmbeddedServerError, wheel_bin_dir
from codity.worker.claim import CLAIM_AND_START
from codity.worker.reporter import COMPLETE_MANY

__all__ = [
    "drain_as_the_worker",
    "loop_workers",
    "pgbench_path",
    "worker_loop_command",
    "worker_loop_script",
]


def pgbench_path(pg_bin: Path | None = None) -> Path:
    """pgbench from CODITY_PG_BIN, else the embedded wheel's bin folder, else the PATH."""
    candidates = [pg_bin] if pg_bin else []
    with contextlib.suppress(EmbeddedServerError):
        candidates.append(wheel_bin_dir())
    for folder in candidates:
        if (folder / "pgbench").exists():
            return folder / "pgbench"
    found = shutil.which("pgbench")
    if found is None:
        raise BenchError("pgbench not found: set CODITY_PG_BIN to a PostgreSQL bin folder")
    return Path(found)


def worker_loop_script() -> str:
    """One claim of ``:batch`` jobs from the queue whose id is ``:queue`` by worker
    ``:wbase + :client_id``, then their completion; run with ``--protocol=prepared``
    (variables become parameters)."""
    claim = CLAIM_AND_START.strip()
    for name, variable in (("worker", ":wid"), ("queue_id", ":queue"), ("limit", ":batch"),
                           ("suspects", "true")):  # fmt: skip
        claim = claim.replace(f"%({name})s", variable)
    complete = COMPLETE_MANY
    for placeholder, variable in (("%s,", ":queue,"), ("%s::bigint[]", ":ids::bigint[]"),
                                  ("%s::integer[]", ":fences::integer[]"),
                                  ("%s::jsonb[]", "NULL::jsonb[]"),
                                  ("%s::integer[]", "NULL::integer[]")):  # fmt: skip
        complete = complete.replace(placeholder, variable, 1)
    if "%" in claim + complete:
        raise BenchError("a worker statement has a parameter the pgbench script does not fill")
    return "\n".join([
        "\\set wid :wbase + :client_id",
        "SELECT coalesce(pg_catalog.array_agg(r.job_id ORDER BY r.job_id), '{}') AS ids,",
        "       coalesce(pg_catalog.array_agg(r.fence ORDER BY r.job_id), '{}') AS fences",
        f"FROM ({claim}) AS r",
        "\\gset",
        f"{complete};",
        "",
    ])  # fmt: skip


def loop_workers(
    conn: psycopg.Connection[Any], queue: str, clients: int, name: str
) -> tuple[int, int]:
    """Register one worker per pgbench client for ``queue``; returns the first worker id,
    which is ``:wbase`` (client n, pgbench's ``client_id`` counting from 0, is worker
    wbase + n), and the queue's id, which is ``:queue``."""
    ids = [
        int(conn.execute("SELECT codity.register_worker(%s, ARRAY[%s])",
                         [f"{name}-{n}", queue]).fetchall()[0][0])
        for n in range(clients)
    ]  # fmt: skip
    if ids != list(range(ids[0], ids[0] + clients)):
        raise BenchError(f"pgbench workers got ids {ids}, not consecutive")
    queue_id = conn.execute("SELECT queue_id FROM codity.worker_queues(%s)", [ids[0]]).fetchall()[
        0
    ][0]
    return ids[0], int(queue_id)


def worker_loop_command(
    pgbench: Path, script: Path, url: str, *, clients: int, transactions: int, wbase: int,
    queue_id: int, batch: int,
) -> list[str]:  # fmt: skip
    """pgbench running ``script`` (worker_loop_script) ``transactions`` times per client."""
    return [
        str(pgbench), "--no-vacuum", "--protocol=prepared", f"--client={clients}",
        f"--jobs={clients}", f"--transactions={transactions}", f"--file={script}",
        f"--define=wbase={wbase}", f"--define=queue={queue_id}", f"--define=batch={batch}", url,
    ]  # fmt: skip


def drain_as_the_worker(
    conn: psycopg.Connection[Any], worker_id: int, queue_id: int, batch: int
) -> int:
    """The same two statements from Python, on one connection: claim ``batch`` jobs, complete
    them, until the queue has none due; returns how many. Raises BenchError if a completion
    is refused. For the scripts that weigh one backend's work (scripts/wal_per_job.py,
    scripts/hot_path_cost.py)."""
    claim = {"worker": worker_id, "queue_id": queue_id, "limit": batch, "suspects": True}
    done = 0
    while claimed := conn.execute(CLAIM_AND_START, claim, prepare=True).fetchall():
        ids, fences = [r[0] for r in claimed], [r[1] for r in claimed]
        outcomes = conn.execute(COMPLETE_MANY, [queue_id, ids, fences, [None] * len(ids), None],
                                prepare=True).fetchall()  # fmt: skip
        refused = [row for row in outcomes if row[2] != "applied"]
        if refused:
            raise BenchError(f"completions refused: {refused[:3]}")
        done += len(ids)
    return done
