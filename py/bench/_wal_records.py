"""What a span of WAL holds, record by record: the measured side of issue 28's cost model.

``pg_walinspect`` (a contrib module of PostgreSQL 15+, created in the database read) lists
every record between two insert positions; each is charged to the relation of its first
block (read from the record's block references, which every supported version lists; a
heap update to another page names the same table twice) and grouped by resource manager
and record type. From that:

- **row versions**: heap records on tables — INSERT (one row), MULTI_INSERT (its ``ntuples``:
  a COPY or a batched insert), UPDATE and HOT_UPDATE (a new version), DELETE, and LOCK (a
  row locked, SELECT … FOR UPDATE: no new version, but a record of its own);
- **index entries**: B-tree INSERT_LEAF and INSERT_POST, GIN and hash INSERT records, per
  index (a page split or a deduplication is WAL without a new entry, counted in bytes only);
- **transactions**: COMMIT records (transactions that wrote);
- **bytes**: each record's whole length, full-page images included and shown apart.

Other databases' records in the span (none on the bench's own server when it is quiet)
are charged to "another database"; records with no block (commits, checkpoints, running
transactions) to "no relation".
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import psycopg

from codity.bench._workers import BenchError

__all__ = ["WalRow", "WalSpan", "read_span"]

Conn = psycopg.Connection[Any]

# The first block a record names, from its description (PostgreSQL 15 has no
# pg_get_wal_block_info): "blkref #0: rel <tablespace>/<database>/<filenode> fork ...".
_RECORDS = """
WITH rel AS (
    SELECT pg_catalog.pg_relation_filenode(c.oid) AS filenode, c.relname, c.relkind,
           n.nspname
    FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
    WHERE pg_catalog.pg_relation_filenode(c.oid) IS NOT NULL
),
here AS (
    SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database()
),
rec AS (
    SELECT r.resource_manager, r.record_type, r.record_length, r.fpi_length, r.description,
           pg_catalog.regexp_match(r.block_ref, 'blkref #0: rel [0-9]+/([0-9]+)/([0-9]+)') AS blk
    FROM pg_get_wal_records_info(%(from)s::pg_lsn, %(to)s::pg_lsn) r
)
SELECT CASE
           WHEN r.blk IS NULL THEN ''
           WHEN r.blk[1]::oid NOT IN (0, (SELECT oid FROM here)) THEN '*'
           ELSE coalesce(rel.nspname || '.' || rel.relname, r.blk[2])
       END AS relation,
       coalesce(rel.relkind::text, '') AS relkind,
       r.resource_manager, pg_catalog.split_part(r.record_type, '+', 1) AS record_type,
       count(*)::bigint AS records,
       sum(r.record_length)::bigint AS bytes,
       sum(r.fpi_length)::bigint AS fpi_bytes,
       sum(CASE WHEN r.record_type LIKE 'MULTI_INSERT%%'
                THEN pg_catalog.substring(r.description, 'ntuples: ([0-9]+)')::bigint
                ELSE 0 END)::bigint AS tuples
FROM rec r
LEFT JOIN rel ON rel.filenode = r.blk[2]::oid
             AND r.blk[1]::oid IN (0, (SELECT oid FROM here))
GROUP BY 1, 2, 3, 4
"""
_ROW_VERSIONS = {"INSERT": "inserted", "UPDATE": "updated", "HOT_UPDATE": "updated (HOT)",
                 "DELETE": "deleted", "LOCK": "locked"}  # fmt: skip
_INDEX_ENTRIES = {("Btree", "INSERT_LEAF"), ("Btree", "INSERT_POST"), ("Gin", "INSERT"),
                  ("Hash", "INSERT")}  # fmt: skip


@dataclass(frozen=True, slots=True)
class WalRow:
    """The records of one kind on one relation ('' none, '*' another database)."""

    relation: str
    relkind: str
    rmgr: str
    record_type: str
    records: int
    bytes: int
    fpi_bytes: int
    tuples: int

    @property
    def row_versions(self) -> tuple[str, int] | None:
        """('inserted' | 'updated' | 'updated (HOT)' | 'deleted' | 'locked', rows) for a
        heap record on a table, else None."""
        if self.relkind not in ("r", "t") or self.rmgr not in ("Heap", "Heap2"):
            return None
        if self.record_type == "MULTI_INSERT":
            return "inserted", self.tuples
        kind = _ROW_VERSIONS.get(self.record_type)
        return None if kind is None or self.rmgr != "Heap" else (kind, self.records)

    @property
    def index_entries(self) -> int:
        return self.records if (self.rmgr, self.record_type) in _INDEX_ENTRIES else 0


@dataclass(frozen=True, slots=True)
class WalSpan:
    """Every record between two insert positions, grouped."""

    rows: tuple[WalRow, ...]

    @property
    def bytes(self) -> int:
        return sum(r.bytes for r in self.rows)

    @property
    def fpi_bytes(self) -> int:
        return sum(r.fpi_bytes for r in self.rows)

    @property
    def commits(self) -> int:
        return sum(r.records for r in self.rows
                   if r.rmgr == "Transaction" and r.record_type == "COMMIT")  # fmt: skip

    def row_versions(self) -> dict[str, int]:
        found: dict[str, int] = {}
        for row in self.rows:
            if (kind := row.row_versions) is not None:
                found[kind[0]] = found.get(kind[0], 0) + kind[1]
        return found

    def index_entries(self) -> int:
        return sum(r.index_entries for r in self.rows)

    def by_relation(self) -> list[tuple[str, str, int, int, int, int]]:
        """(relation, relkind, bytes, records, row versions, index entries), most bytes
        first; records with no relation under ''."""
        merged: dict[tuple[str, str], list[int]] = {}
        for row in self.rows:
            entry = merged.setdefault((row.relation, row.relkind), [0, 0, 0, 0])
            entry[0] += row.bytes
            entry[1] += row.records
            versions = row.row_versions
            entry[2] += versions[1] if versions is not None and versions[0] != "locked" else 0
            entry[3] += row.index_entries
        return sorted(((rel, kind, *vals) for (rel, kind), vals in merged.items()),  # type: ignore[misc]
                      key=lambda r: -r[2])  # fmt: skip


def _wait_flushed(conn: Conn, upto: str, timeout_s: float = 10.0) -> None:
    """pg_walinspect reads only what is flushed; a relaxed commit's WAL is flushed by the
    WAL writer within wal_writer_delay."""
    deadline = time.monotonic() + timeout_s
    query = "SELECT pg_catalog.pg_current_wal_flush_lsn() >= %s::pg_lsn"
    while not (row := conn.execute(query, [upto]).fetchone()) or not row[0]:
        if time.monotonic() > deadline:
            raise BenchError(f"the WAL up to {upto} was not flushed within {timeout_s:.0f} s")
        time.sleep(0.05)


def read_span(conn: Conn, window: Iterable[str]) -> WalSpan:
    """The records from the first insert position to the second, read in ``conn``'s
    database (pg_walinspect is created there if missing: a superuser's connection)."""
    start, end = window
    conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
    _wait_flushed(conn, end)
    rows = conn.execute(_RECORDS, {"from": start, "to": end}).fetchall()
    return WalSpan(tuple(WalRow(str(r[0]), str(r[1]), str(r[2]), str(r[3]), int(r[4]),
                                int(r[5]), int(r[6]), int(r[7])) for r in rows))  # fmt: skip
