"""docs/SQL_API.md, generated from the catalogue of a migrated database (pgmq's format).

Everything on the page comes from PostgreSQL itself: signatures from
``pg_get_function_arguments``/``pg_get_function_result``, grants from the ACLs, prose from
``COMMENT ON FUNCTION``/``COMMENT ON VIEW``. A comment's first line is the summary, the
rest the description, and a final ``Example: ...`` line becomes a psql example. The error
table comes from ``codity.db.errors.SQLSTATES``.

The output is deterministic (no OIDs, owner names, versions or dates) so that
tests/test_generated_docs.py can compare it with the file in the repository.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row

from codity._sql_api_prose import ANY_LANGUAGE, INTRO
from codity.db.errors import SQLSTATES
from codity.db.migrate import migrate
from codity.explain import scratch_database
from codity.roles_reference import write_roles

__all__ = ["ERROR_MEANINGS", "reference_path", "render_reference", "write_reference"]

log = logging.getLogger(__name__)

SCHEMA = "codity"

ERROR_MEANINGS: dict[str, str] = {
    "CD001": "unknown queue (in the project)",
    "CD002": "unknown project, or no default project",
    "CD003": "unknown job (in the project)",
    "CD004": "unknown worker",
    "CD005": "worker not active: it deregistered or was declared dead",
    "CD006": "unknown schedule",
    "CD007": "unknown dead letter",
    "CD008": "unknown workflow or batch",
    "CD010": "invalid argument (NULL, out of range, malformed)",
    "CD011": "payload or result larger than 64 KB",
    "CD012": "invalid cron expression",
    "CD013": "unknown time zone",
    "CD020": "illegal lifecycle transition (the message names both states)",
    "CD021": "already done (e.g. a dead letter replayed twice)",
    "CD022": "not permitted: only a superuser or a member of codity_clock may pass p_now",
    "CD023": "not permitted: the worker did not register for that queue",
}

_FUNCTIONS = """
SELECT p.proname::text AS name,
       pg_catalog.pg_get_function_identity_arguments(p.oid) AS identity,
       pg_catalog.pg_get_function_arguments(p.oid) AS arguments,
       pg_catalog.pg_get_function_result(p.oid) AS result,
       p.prosecdef AS is_definer,
       p.provolatile::text AS volatility,
       coalesce(p.proconfig, '{}') AS config,
       pg_catalog.obj_description(p.oid, 'pg_proc') AS comment,
       coalesce((
           SELECT pg_catalog.json_agg(pg_catalog.json_build_object(
                      'name', coalesce(a.arg_name, ''),
                      'mode', coalesce(a.arg_mode::text, 'i'),
                      'type', pg_catalog.format_type(a.arg_type, NULL),
                      'default', pg_catalog.pg_get_function_arg_default(p.oid, a.ord::integer))
                  ORDER BY a.ord)
           FROM ROWS FROM (pg_catalog.unnest(coalesce(p.proallargtypes, p.proargtypes::oid[])),
                           pg_catalog.unnest(p.proargmodes),
                           pg_catalog.unnest(p.proargnames))
                WITH ORDINALITY AS a(arg_type, arg_mode, arg_name, ord)
       ), '[]') AS params,
       coalesce((
           SELECT pg_catalog.array_agg(CASE WHEN acl.grantee = 0 THEN 'PUBLIC'
                                            ELSE pg_catalog.pg_get_userbyid(acl.grantee)::text END)
           FROM pg_catalog.aclexplode(
                    coalesce(p.proacl, pg_catalog.acldefault('f', p.proowner))) acl
           WHERE acl.privilege_type = 'EXECUTE' AND acl.grantee <> p.proowner
       ), '{}') AS roles
FROM pg_catalog.pg_proc p
JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = %(schema)s
  AND pg_catalog.left(p.proname, 1) <> '_'
  AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
                  WHERE d.classid = 'pg_catalog.pg_proc'::regclass AND d.objid = p.oid
                    AND d.deptype = 'e')
"""

_VIEWS = """
SELECT c.relname::text AS name,
       pg_catalog.obj_description(c.oid, 'pg_class') AS comment,
       (SELECT pg_catalog.json_agg(pg_catalog.json_build_object(
                   'name', a.attname::text,
                   'type', pg_catalog.format_type(a.atttypid, a.atttypmod),
                   'comment', pg_catalog.col_description(c.oid, a.attnum))
               ORDER BY a.attnum)
        FROM pg_catalog.pg_attribute a
        WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped) AS columns,
       coalesce((
           SELECT pg_catalog.array_agg(CASE WHEN acl.grantee = 0 THEN 'PUBLIC'
                                            ELSE pg_catalog.pg_get_userbyid(acl.grantee)::text END)
           FROM pg_catalog.aclexplode(
                    coalesce(c.relacl, pg_catalog.acldefault('r', c.relowner))) acl
           WHERE acl.privilege_type = 'SELECT' AND acl.grantee <> c.relowner
       ), '{}') AS roles
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %(schema)s AND c.relkind IN ('v', 'm')
  AND pg_catalog.left(c.relname, 1) <> '_'
"""

_VOLATILITY = {"i": "immutable", "s": "stable", "v": "volatile"}
_MODES = {"i": "", "o": "OUT ", "b": "INOUT ", "v": "VARIADIC "}
_EXAMPLE = re.compile(r"^Example:\s*(?P<sql>.+)$")
# Characters that markdown would read as markup in running text. '_' only at a word's edge,
# so p_limit stays readable; '[' so that no bracket pair becomes a link.
_MARKUP = re.compile(r"[\\`*<\[]|(?<!\w)_|_(?!\w)")


@dataclass(frozen=True, slots=True)
class Param:
    name: str
    mode: str
    type: str
    default: str | None

    def declaration(self) -> str:
        default = f" DEFAULT {self.default}" if self.default is not None else ""
        return f"{_MODES[self.mode]}{self.name} {self.type}{default}".strip()


@dataclass(frozen=True, slots=True)
class Function:
    name: str
    identity: str
    arguments: str
    result: str
    is_definer: bool
    volatility: str
    config: tuple[str, ...]
    comment: str | None
    params: tuple[Param, ...]
    roles: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class View:
    name: str
    comment: str | None
    columns: tuple[tuple[str, str, str | None], ...]
    roles: tuple[str, ...]


def reference_path() -> Path:
    """docs/SQL_API.md of this checkout."""
    return Path(__file__).resolve().parents[1] / "docs" / "SQL_API.md"


def _load(conn: psycopg.Connection[Any]) -> tuple[list[Function], list[View]]:
    cur = conn.cursor(row_factory=dict_row)
    functions = [
        Function(
            **{
                **r,
                "config": tuple(r["config"]),
                "roles": tuple(sorted(r["roles"])),
                "params": tuple(Param(**p) for p in r["params"]),
            }
        )
        for r in cur.execute(_FUNCTIONS, {"schema": SCHEMA}).fetchall()
    ]
    views = [
        View(
            **{
                **r,
                "roles": tuple(sorted(r["roles"])),
                "columns": tuple((c["name"], c["type"], c["comment"]) for c in r["columns"]),
            }
        )
        for r in cur.execute(_VIEWS, {"schema": SCHEMA}).fetchall()
    ]
    functions.sort(key=lambda f: (f.name, f.identity))
    views.sort(key=lambda v: v.name)
    return functions, views


# -- text ------------------------------------------------------------------------------


def _md(text: str) -> str:
    return _MARKUP.sub(lambda m: "\\" + m.group(0), text)


def _paragraphs(text: str) -> list[str]:
    """Blank-line separated paragraphs, each joined into one line and escaped."""
    blocks = re.split(r"\n\s*\n", text.strip())
    return [_md(" ".join(line.strip() for line in b.splitlines())) for b in blocks if b.strip()]


def _split_comment(comment: str | None) -> tuple[str, list[str], str | None]:
    """(summary, description paragraphs, example) of a COMMENT ON text."""
    if not comment or not comment.strip():
        return "", [], None
    lines = comment.strip().splitlines()
    example = None
    match = _EXAMPLE.match(lines[-1].strip())
    if match and len(lines) > 1:
        example = match["sql"].strip()
        lines = lines[:-1]
    summary, rest = lines[0].strip(), "\n".join(lines[1:])
    return _md(summary), _paragraphs(rest), example


def _roles(roles: tuple[str, ...], none: str) -> str:
    return ", ".join(f"`{r}`" for r in roles) if roles else none


def _signature(f: Function) -> str:
    inputs = [p for p in f.params if p.mode != "t"]
    columns = [p for p in f.params if p.mode == "t"]
    declared = [p.declaration() for p in inputs]
    if ", ".join(declared) != f.arguments:  # something the split cannot show faithfully
        declared = [f.arguments] if f.arguments else []
    head = f"{SCHEMA}.{f.name}(" + ("\n    " + ",\n    ".join(declared) + "\n" if declared else "")
    if columns:
        returns = "TABLE (\n    " + ",\n    ".join(f"{c.name} {c.type}" for c in columns) + "\n)"
    else:
        returns = f.result
    return f"{head}) RETURNS {returns}"


def _function_body(f: Function) -> list[str]:
    summary, description, example = _split_comment(f.comment)
    security = (
        "`SECURITY DEFINER` (runs with the owner's rights)"
        if f.is_definer
        else ("`SECURITY INVOKER` (runs with the caller's rights)")
    )
    settings = "; ".join(f"`SET {c.replace('=', ' = ', 1)}`" for c in f.config)
    out = [summary or "*No COMMENT ON FUNCTION: undocumented.*", ""]
    out += ["```sql", _signature(f), "```", ""]
    out.append(f"- **Security:** {security}" + (f"; {settings}" if settings else ""))
    out.append(f"- **Volatility:** {_VOLATILITY.get(f.volatility, f.volatility)}")
    out.append(f"- **EXECUTE granted to:** {_roles(f.roles, 'no role but the owner')}")
    out.append("")
    for paragraph in description:
        out += [paragraph, ""]
    if example:
        out += ["Example:", "", "```sql", example, "```", ""]
    return out


def _functions_section(functions: list[Function]) -> list[str]:
    out = ["## Functions", ""]
    names = sorted({f.name for f in functions})
    for name in names:
        overloads = [f for f in functions if f.name == name]
        out += [f"### {SCHEMA}.{name}", ""]
        for f in overloads:
            if len(overloads) > 1:
                out += [f"#### `{SCHEMA}.{name}({f.identity})`", ""]
            out += _function_body(f)
    return out


def _views_section(views: list[View]) -> list[str]:
    out = [
        "## Views",
        "",
        "Read models over the private tables. They run with their owner's rights, so a role",
        "that may SELECT from a view needs no access to the tables beneath it.",
        "",
    ]
    for v in views:
        summary, description, example = _split_comment(v.comment)
        out += [f"### {SCHEMA}.{v.name}", "", summary or "*No COMMENT ON VIEW.*", ""]
        for paragraph in description:
            out += [paragraph, ""]
        out += [f"- **SELECT granted to:** {_roles(v.roles, 'no role but the owner')}", ""]
        noted = any(note for _, _, note in v.columns)
        out += [
            "| Column | Type |" + (" Note |" if noted else ""),
            "| --- | --- |" + (" --- |" if noted else ""),
        ]
        for column, type_, note in v.columns:
            text = " " + _md(note or "").replace("|", "\\|") + " |" if noted else ""
            out.append(f"| `{column}` | `{type_}` |{text}")
        out.append("")
        if example:
            out += ["Example:", "", "```sql", example, "```", ""]
    return out


def _errors_section() -> list[str]:
    missing = sorted(set(SQLSTATES) ^ set(ERROR_MEANINGS))
    if missing:
        raise ValueError(f"SQLSTATES and ERROR_MEANINGS disagree on: {', '.join(missing)}")
    out = [
        "## Errors",
        "",
        "Every condition the API raises has its own SQLSTATE in class `CD`, raised with a",
        "MESSAGE, and where it helps a DETAIL and a HINT. Branch on the code, never on the",
        "message text. In Python, `codity.db.translate(exc)` turns a `psycopg.Error` into the",
        "class below (all subclasses of `codity.db.CodityError`, importable from `codity.db`);",
        "other SQLSTATEs are not ours and stay psycopg errors.",
        "",
        "| SQLSTATE | Python exception | Meaning |",
        "| --- | --- | --- |",
    ]
    for code in sorted(SQLSTATES):
        out.append(f"| `{code}` | `{SQLSTATES[code].__name__}` | {ERROR_MEANINGS[code]} |")
    return [*out, ""]


def _index(functions: list[Function], views: list[View]) -> list[str]:
    out = [
        "## Contents",
        "",
        "- [Writing a worker in any language](#writing-a-worker-in-any-language)",
    ]
    seen: set[str] = set()
    for f in functions:
        if f.name in seen:
            continue
        seen.add(f.name)
        summary = _split_comment(f.comment)[0]
        out.append(f"- [`{SCHEMA}.{f.name}`](#{SCHEMA}{f.name}) — {summary}")
    out.append("- Views: " + ", ".join(f"[`{SCHEMA}.{v.name}`](#{SCHEMA}{v.name})" for v in views))
    out += ["- [Errors](#errors)", ""]
    return out


def render_reference(url: str) -> str:
    """The text of docs/SQL_API.md for the database at ``url`` (already migrated)."""
    with psycopg.connect(url, autocommit=True) as conn:
        functions, views = _load(conn)
    lines = [
        INTRO,
        *_index(functions, views),
        ANY_LANGUAGE,
        *_functions_section(functions),
        *_views_section(views),
        *_errors_section(),
    ]
    return "\n".join(lines).rstrip("\n") + "\n"


def _write_roles(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        write_roles(conn)


def write_reference(url: str) -> Path:
    """Write docs/SQL_API.md (and the roles table of docs/DATABASE.md); returns its path.

    Rendered from a fresh database migrated on ``url``'s server, so that a function left
    behind in a long-lived database (a rename, a dropped overload) never reaches the page and
    the page equals what the test renders. A role that may not create databases gets the
    page of ``url``'s database itself.
    """
    try:
        with scratch_database(url, "codity_reference") as scratch:
            text = render_reference(scratch)
            _write_roles(scratch)
    except psycopg.errors.InsufficientPrivilege:
        log.warning("may not create a scratch database: rendering the target database")
        migrate(url)
        text = render_reference(url)
        _write_roles(url)
    path = reference_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path
