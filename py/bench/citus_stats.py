"""What each server did over a drain: CPU, WAL, its statements, and Citus's multi-shard log.

Read on every server of a side, at the same two moments as the drain's clock: just before
the queues are resumed (the worker processes are up and idle), and as soon as the last job
is seen finished, while the workers still run (so their CPU is counted; codity.bench._usage).

- **CPU and WAL** per server: codity.bench._usage, on a connection to that server (its
  postmaster is the parent of the connection's backend).
- **Statements**: ``pg_stat_statements`` (``track = all``) reset on every server before, read
  after, per normalised statement and level: top level (what a client sent: a worker
  process to the coordinator or the plain server; the coordinator, or another node, to a
  worker node) or nested (run inside a function on that server). The bench's own statements
  carry ``codity_bench`` (a comment, or a column alias, which Citus keeps when it sends a
  statement on to a node) and are left out.
- **Multi-shard statements**: with ``citus.multi_task_query_log_level = log``, Citus logs
  "multi-task query about to be executed" for every statement it runs on more than one
  shard, with the statement and the function it came from. The lines each node's log gained
  during the drain are the proof: none, or the list. ``citus_stat_statements`` (executor,
  partition key) is read beside it on the coordinator; its NULL partition key is not a
  proof by itself: a delegated function call and a reference-table statement have none.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from codity.bench._usage import Usage, postmaster_pid, read_usage, spent_since
from codity.bench.citus_model import MultiTask, NodeSpent, StatementCount
from codity.bench.citus_servers import Node

__all__ = ["TAG", "Before", "before_drain", "citus_statements", "spent"]

Conn = psycopg.Connection[Any]
TAG = "codity_bench"
_RESET = f"SELECT /* {TAG} */ public.pg_stat_statements_reset()"
_CITUS_RESET = f"SELECT /* {TAG} */ pg_catalog.citus_stat_statements_reset()"
_READ = f"""
SELECT /* {TAG} */ s.query, s.toplevel, sum(s.calls)::bigint
FROM public.pg_stat_statements s
WHERE s.dbid = (SELECT d.oid FROM pg_catalog.pg_database d
                WHERE d.datname = pg_catalog.current_database())
  AND s.query NOT LIKE '%{TAG}%'
GROUP BY s.query, s.toplevel
ORDER BY 3 DESC
"""
_CITUS_READ = f"""
SELECT /* {TAG} */ s.query, s.partition_key IS NOT NULL, sum(s.calls)::bigint
FROM pg_catalog.citus_stat_statements s
WHERE s.dbid = (SELECT d.oid FROM pg_catalog.pg_database d
                WHERE d.datname = pg_catalog.current_database())
  AND s.query NOT LIKE '%{TAG}%'
GROUP BY s.query, s.partition_key IS NOT NULL
ORDER BY 3 DESC
"""
_MULTI_TASK = "multi-task query about to be executed"
# The server's default log_line_prefix, '%m [%p] ': time, zone, [pid], then the level.
_ENTRY = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \S+ \[(\d+)\] ([A-Z]+):  (.*)$")


@dataclass(frozen=True, slots=True)
class Before:
    """One server's counters just before the drain."""

    node: Node
    postmaster: int | None
    usage: Usage
    log_offset: int


def before_drain(node: Node, conn: Conn, *, citus: bool) -> Before:
    """Reset the server's statement counters and read its CPU, WAL and log position."""
    conn.execute(_RESET)
    if citus and node.name == "coordinator":
        conn.execute(_CITUS_RESET)
    postmaster = postmaster_pid(conn)
    offset = node.logfile.stat().st_size if node.logfile.exists() else 0
    return Before(node, postmaster, read_usage(conn, postmaster), offset)


def spent(before: Before, conn: Conn) -> tuple[NodeSpent, float]:
    """The server's CPU, WAL, statements and multi-task log lines since ``before``; and the
    CPU of this process's children (the worker processes) over the same span."""
    used = spent_since(conn, before.usage, before.postmaster)
    rows = conn.execute(_READ).fetchall()
    statements = tuple(StatementCount(_one_line(q), int(c), bool(t)) for q, t, c in rows)
    node = NodeSpent(
        node=before.node.name,
        cpu_s=used.server_cpu_s,
        wal_bytes=used.wal_bytes,
        statements=statements,
        multi_task=multi_tasks(before.node.name, before.node.logfile, before.log_offset),
    )
    return node, used.workers_cpu_s


def citus_statements(conn: Conn) -> tuple[int, tuple[StatementCount, ...]]:
    """citus_stat_statements on the coordinator: calls with a partition key value, and the
    statements without one (their calls)."""
    keyed, unkeyed = 0, []
    for query, has_key, calls in conn.execute(_CITUS_READ).fetchall():
        if has_key:
            keyed += int(calls)
        else:
            unkeyed.append(StatementCount(_one_line(query), int(calls), True))
    return keyed, tuple(unkeyed)


def _one_line(query: str) -> str:
    return " ".join(query.split())


def multi_tasks(node: str, logfile: Path, offset: int) -> tuple[MultiTask, ...]:
    """Each "multi-task query" line the log gained past ``offset``, with the STATEMENT and
    CONTEXT lines the same backend logged with it."""
    if not logfile.exists():
        return ()
    with logfile.open("rb") as f:
        f.seek(offset)
        text = f.read().decode("utf-8", errors="replace")
    entries: list[list[str]] = []  # [pid, level, message]
    for line in text.splitlines():
        found = _ENTRY.match(line)
        if found:
            entries.append([found[1], found[2], found[3]])
        elif entries and line.startswith("\t"):
            entries[-1][2] += " " + line.strip()
    found_tasks = []
    for i, (pid, level, message) in enumerate(entries):
        if level != "LOG" or _MULTI_TASK not in message:
            continue
        statement, context = "", ""
        for other_pid, other_level, other in entries[i + 1 :]:
            if other_pid != pid:
                continue
            if other_level == "STATEMENT":
                statement = _one_line(other)
            elif other_level == "CONTEXT":
                context = _one_line(other)
            elif other_level not in {"HINT", "DETAIL"}:
                break
        found_tasks.append(MultiTask(node, statement, context))
    return tuple(found_tasks)
