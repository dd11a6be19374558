"""The SQL sources read as STYLE.md says they should, checked by parsing them with pglast.

pglast (GPL) is used here, in tests only, never by code that ships. Each file is parsed
with PostgreSQL's own parser, so these checks look at statements, not at text.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pglast import ast, enums, parse_sql
from pglast.visitors import Ancestor, Visitor

from codity.db.migrate import function_files, sql_dir

MIGRATIONS = sorted((sql_dir() / "migrations").glob("*.sql"))
FUNCTION_FILES = function_files()


def _name(node: ast.CreateFunctionStmt) -> str:
    return ".".join(part.sval for part in node.funcname or ())


def _options(node: ast.CreateFunctionStmt) -> dict[str, object]:
    return {opt.defname: opt.arg for opt in node.options or ()}


class _Unqualified(Visitor):
    """Collects table references that name no schema, except CTE names and the aliases a
    FOR UPDATE OF names (those are the query's own range entries, not tables)."""

    def __init__(self, ctes: set[str]) -> None:
        super().__init__()
        self.ctes = ctes
        self.found: list[str] = []

    def visit_RangeVar(self, ancestors: Ancestor, node: ast.RangeVar) -> None:
        if _in_locking_clause(ancestors):
            return
        if node.schemaname is None and node.relname is not None and node.relname not in self.ctes:
            self.found.append(node.relname)


def _in_locking_clause(ancestors: Ancestor | None) -> bool:
    while ancestors is not None and ancestors.node is not None:
        if isinstance(ancestors.node, ast.LockingClause):
            return True
        ancestors = ancestors.parent
    return False


class _CteNames(Visitor):
    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def visit_CommonTableExpr(self, _ancestors: object, node: ast.CommonTableExpr) -> None:
        if node.ctename is not None:
            self.names.add(node.ctename)


def _unqualified_tables(sql: str) -> list[str]:
    tree = parse_sql(sql)
    ctes = _CteNames()
    ctes(tree)
    finder = _Unqualified(ctes.names)
    finder(tree)
    return finder.found


@pytest.mark.parametrize("path", MIGRATIONS, ids=[p.name for p in MIGRATIONS])
def test_migrations_qualify_every_table_and_type_with_the_schema(path: Path) -> None:
    text = path.read_text()
    assert _unqualified_tables(text) == []
    tree = parse_sql(text)
    enums_created = [raw.stmt for raw in tree if isinstance(raw.stmt, ast.CreateEnumStmt)]
    for stmt in enums_created:
        assert stmt.typeName is not None and stmt.typeName[0].sval == "codity", stmt.typeName


def test_the_qualification_check_finds_an_unqualified_table() -> None:
    sql = "WITH c AS (SELECT 1) SELECT * FROM jobs, c, codity.queues JOIN workers ON true"
    assert _unqualified_tables(sql) == ["jobs", "workers"]
    locked = "SELECT 1 FROM codity.jobs j, jobs FOR UPDATE OF j"
    assert _unqualified_tables(locked) == ["jobs"]


@pytest.mark.parametrize("path", FUNCTION_FILES, ids=[p.name for p in FUNCTION_FILES])
def test_function_file_has_the_shape_style_asks_for(path: Path) -> None:
    text = path.read_text()
    assert text.startswith("-- codity."), "a header comment naming the function comes first"
    tree = [raw.stmt for raw in parse_sql(text)]
    functions = [s for s in tree if isinstance(s, ast.CreateFunctionStmt)]
    assert functions, "one function (or a tight family) per file"
    commented = {
        ".".join(p.sval for p in s.object.objname or ())
        for s in tree
        if isinstance(s, ast.CommentStmt) and isinstance(s.object, ast.ObjectWithArgs)
    }
    revoked = {
        ".".join(p.sval for p in obj.objname or ())
        for s in tree
        if isinstance(s, ast.GrantStmt) and not s.is_grant
        for obj in s.objects or ()
        if any(g.roletype == enums.RoleSpecType.ROLESPEC_PUBLIC for g in s.grantees or ())
    }
    for fn in functions:
        name = _name(fn)
        assert name.startswith("codity."), f"{name}: create in schema codity"
        assert fn.replace, f"{name}: CREATE OR REPLACE, so migrate can re-apply the file"
        assert name == f"codity.{path.stem}" or name in commented, name
        options = _options(fn)
        assert "language" in options, f"{name}: explicit LANGUAGE"
        assert "volatility" in options, f"{name}: explicit volatility"
        if getattr(options.get("security"), "boolval", False):
            # A function may SET more than one setting (claim_in_queue's plan settings).
            sets = [o.arg for o in fn.options or () if o.defname == "set"]
            assert any(
                isinstance(s, ast.VariableSetStmt) and s.name == "search_path" for s in sets
            ), f"{name}: SET search_path"
        inputs = [
            p.name
            for p in fn.parameters or ()
            if p.mode not in (enums.FunctionParameterMode.FUNC_PARAM_TABLE,
                              enums.FunctionParameterMode.FUNC_PARAM_OUT)
        ]  # fmt: skip
        assert all(n is None or n.startswith("p_") for n in inputs), f"{name}: parameters are p_*"
        assert name in commented, f"{name}: COMMENT ON FUNCTION"
        assert name in revoked, f"{name}: REVOKE ... FROM PUBLIC"
    if any(_name(fn) == f"codity.{path.stem}" for fn in functions):
        return
    pytest.fail(f"{path.name} is named after none of the functions it defines")


SQL_BODIES = [
    (path, fn)
    for path in FUNCTION_FILES
    for fn in (raw.stmt for raw in parse_sql(path.read_text()))
    if isinstance(fn, ast.CreateFunctionStmt)
    and getattr(_options(fn).get("language"), "sval", None) == "sql"
]


@pytest.mark.parametrize("path,fn", SQL_BODIES, ids=[_name(fn) for _, fn in SQL_BODIES])
def test_sql_function_bodies_qualify_every_table(path: Path, fn: ast.CreateFunctionStmt) -> None:
    body = _options(fn)["as"]
    assert isinstance(body, tuple)
    assert _unqualified_tables(body[0].sval) == []
