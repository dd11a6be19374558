"""WAL written and CPU spent over a drain, read before the workers start and after the last job.

WAL is the server's own counter, ``pg_current_wal_insert_lsn()``: everything the server wrote in
that span (the drain's transactions, and whatever autovacuum or a checkpoint added). The
insert position, not ``pg_current_wal_lsn()`` (the write position): a transaction whose
commit is not waited for (Codity's completions, a server at synchronous_commit off) may
still have its WAL in the buffers when the drain ends.

CPU comes from /proc, so it is there only when the server runs on this machine (the
embedded one does): the postmaster's own time plus that of its children it has already
reaped (``cutime``/``cstime``: backends that ended), plus every live child (backends,
autovacuum, the WAL writer, the checkpointer). The workers' CPU is that of this process's
live children: the worker processes, alive at both readings, so their start-up (imports,
connecting) is not counted.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

__all__ = [
    "Spent",
    "Usage",
    "counting_statements",
    "postmaster_pid",
    "process_cpu_s",
    "read_usage",
    "spent_since",
]

_TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class Usage:
    lsn: str
    server_cpu_s: float | None
    workers_cpu_s: float
    statements: int | None = None
    """Top-level statements other logins sent to this database, read inside
    counting_statements() when the database has pg_stat_statements; None otherwise."""


def _stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name; index 0 is field 3 (state)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rpartition(")")[2].split()


def _cpu(fields: list[str], *, reaped: bool = False) -> float:
    # utime, stime, cutime, cstime are fields 14 to 17 of stat(5): 11 to 14 here.
    ticks = sum(int(x) for x in fields[11 : 15 if reaped else 13])
    return ticks / _TICK


def process_cpu_s(pid: int) -> float | None:
    """User and system CPU seconds of a live process of this machine so far; None if none."""
    fields = _stat(pid)
    return None if fields is None else _cpu(fields)


def _children(parent: int) -> list[list[str]]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields is not None and int(fields[1]) == parent:
                found.append(fields)
    return found


def postmaster_pid(conn: psycopg.Connection[Any]) -> int | None:
    """The server's postmaster, if it runs on this machine (our backend's parent)."""
    row = conn.execute("SELECT pg_catalog.pg_backend_pid()").fetchone()
    assert row is not None
    pid = int(row[0])
    try:
        name = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None
    backend = _stat(pid)
    # Another machine's backend pid may name an unrelated process here.
    return int(backend[1]) if backend is not None and name.startswith("postgres") else None


def _server_cpu(postmaster: int | None) -> float | None:
    if postmaster is None:
        return None
    own = _stat(postmaster)
    if own is None:
        return None
    return _cpu(own, reaped=True) + sum(_cpu(c) for c in _children(postmaster))


# Top-level statements of this database sent by any role but the reader's: the bench reads
# and polls as a login of its own (codity.bench.cost_model), the systems run as another.
_STATEMENTS = """
SELECT coalesce(sum(s.calls), 0)::bigint FROM public.pg_stat_statements s
WHERE s.toplevel
  AND s.dbid = (SELECT d.oid FROM pg_catalog.pg_database d
                WHERE d.datname = pg_catalog.current_database())
  AND s.userid <> (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = current_user)
"""


_COUNTING: ContextVar[bool] = ContextVar("codity_bench_counting_statements", default=False)


@contextmanager
def counting_statements() -> Iterator[None]:
    """Readings inside also count the statements other logins sent (codity.bench.cost_model);
    elsewhere a reading adds no statement of its own to the server's statistics."""
    token = _COUNTING.set(True)
    try:
        yield
    finally:
        _COUNTING.reset(token)


def _statements(conn: psycopg.Connection[Any]) -> int | None:
    if not _COUNTING.get():
        return None
    row = conn.execute(
        "SELECT pg_catalog.to_regclass('public.pg_stat_statements') IS NOT NULL"
    ).fetchone()
    if row is None or not row[0]:
        return None
    found = conn.execute(_STATEMENTS).fetchone()
    assert found is not None
    return int(found[0])


def read_usage(conn: psycopg.Connection[Any], postmaster: int | None) -> Usage:
    row = conn.execute("SELECT pg_catalog.pg_current_wal_insert_lsn()::text").fetchone()
    assert row is not None
    return Usage(
        lsn=str(row[0]),
        server_cpu_s=_server_cpu(postmaster),
        workers_cpu_s=sum(_cpu(c) for c in _children(os.getpid())),
        statements=_statements(conn),
    )


@dataclass(frozen=True, slots=True)
class Spent:
    wal_bytes: int
    server_cpu_s: float | None
    workers_cpu_s: float
    wal_window: tuple[str, str] = ("0/0", "0/0")
    """The insert positions read before and after: where codity.bench.cost_model reads
    the WAL record by record."""
    statements: int | None = None


def spent_since(conn: psycopg.Connection[Any], before: Usage, postmaster: int | None) -> Spent:
    """WAL and CPU from ``before`` to now; read while the workers still run."""
    row = conn.execute(
        "SELECT pg_catalog.pg_wal_lsn_diff(pg_catalog.pg_current_wal_insert_lsn(), %s::pg_lsn)",
        [before.lsn],
    ).fetchone()
    assert row is not None
    now = read_usage(conn, postmaster)
    server = None
    if now.server_cpu_s is not None and before.server_cpu_s is not None:
        server = now.server_cpu_s - before.server_cpu_s
    statements = None
    if now.statements is not None and before.statements is not None:
        statements = now.statements - before.statements
    return Spent(int(row[0]), server, now.workers_cpu_s - before.workers_cpu_s,
                 wal_window=(before.lsn, now.lsn), statements=statements)  # fmt: skip
