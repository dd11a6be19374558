"""The roles table of docs/DATABASE.md, generated from the grants in the catalogue.

A hand-kept list of what each role may do drifted from the grants (codity_app had table
grants it did not list), so ``codity sql-reference`` rewrites what lies between the BEGIN
and END markers from ``pg_proc``/``pg_class`` ACLs and ``pg_policy``; the prose around it
stays hand-written, and tests/test_generated_docs.py fails when the block is stale.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import psycopg

__all__ = ["BEGIN", "END", "ROLES", "database_doc_path", "render_roles", "write_roles"]

BEGIN = "<!-- BEGIN codity roles: generated from the grants; rerun `./codity sql-reference` -->"
END = "<!-- END codity roles -->"
ROLES = ("codity_worker", "codity_app", "codity_readonly")

_EXECUTE = """
SELECT p.proname::text
FROM pg_catalog.pg_proc p
WHERE p.pronamespace = 'codity'::regnamespace
  AND pg_catalog.has_function_privilege(%(role)s, p.oid, 'EXECUTE')
ORDER BY 1
"""

_RELATIONS = """
SELECT c.relname::text, c.relkind::text, priv.name
FROM pg_catalog.pg_class c
CROSS JOIN (VALUES ('SELECT'), ('INSERT'), ('UPDATE'), ('DELETE')) AS priv(name)
WHERE c.relnamespace = 'codity'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm')
  AND pg_catalog.has_table_privilege(%(role)s, c.oid, priv.name)
ORDER BY 1, 3
"""

_POLICIES = """
SELECT c.relname::text
FROM pg_catalog.pg_policy pol
JOIN pg_catalog.pg_class c ON c.oid = pol.polrelid
WHERE c.relnamespace = 'codity'::regnamespace
  AND %(role)s::regrole = ANY (pol.polroles)
ORDER BY 1
"""


def _names(items: list[str]) -> str:
    return ", ".join(f"`{name}`" for name in items) if items else "—"


def render_roles(conn: psycopg.Connection) -> str:
    lines = [
        BEGIN,
        "",
        "| role | EXECUTE | SELECT (views) | SELECT (tables) | INSERT, UPDATE, DELETE"
        " | row-level security policies on |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for role in ROLES:
        functions = sorted({str(r[0]) for r in conn.execute(_EXECUTE, {"role": role})})
        views: list[str] = []
        tables: list[str] = []
        writes: dict[str, list[str]] = defaultdict(list)
        for name, kind, privilege in conn.execute(_RELATIONS, {"role": role}):
            if privilege == "SELECT":
                (views if kind in ("v", "m") else tables).append(str(name))
            else:
                writes[str(name)].append(str(privilege))
        written = [f"{name} ({', '.join(privs)})" for name, privs in sorted(writes.items())]
        policies = sorted({str(r[0]) for r in conn.execute(_POLICIES, {"role": role})})
        lines.append(
            f"| `{role}` | {_names(functions)} | {_names(views)} | {_names(tables)} "
            f"| {_names(written)} | {_names(policies)} |"
        )
    lines += ["", END]
    return "\n".join(lines)


def database_doc_path() -> Path:
    return Path(__file__).resolve().parents[1] / "docs" / "DATABASE.md"


def write_roles(conn: psycopg.Connection, path: Path | None = None) -> Path:
    path = path or database_doc_path()
    text = path.read_text()
    start, end = text.index(BEGIN), text.index(END) + len(END)
    path.write_text(text[:start] + render_roles(conn) + text[end:])
    return path
