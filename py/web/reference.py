"""The route table of docs/API_CONTRACT.md, generated from ALL_ROUTES.

``codity api-reference`` rewrites only what lies between the BEGIN and END markers, so the
prose around it stays hand-written; tests/test_generated_docs.py fails when it is stale.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from codity.web.access import Scope
from codity.web.endpoint import Endpoint
from codity.web.openapi import openapi_path

__all__ = ["BEGIN", "END", "api_contract_path", "render_route_table", "write_route_table"]

BEGIN = "<!-- BEGIN codity api-reference: generated; rerun `./codity api-reference` -->"
END = "<!-- END codity api-reference -->"


def _who(entry: Endpoint) -> str:
    if entry.scope is Scope.PUBLIC:
        return "anyone"
    if entry.scope is Scope.AUTHENTICATED:
        return "signed-in user"
    assert entry.min_role is not None
    keys = "user or key" if entry.api_keys else "user only"
    return f"{entry.min_role.label}+ ({keys})"


def render_route_table(entries: Sequence[Endpoint]) -> str:
    lines = [
        BEGIN,
        "",
        "| method | path | who may call | success | limit | summary |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for e in entries:
        if not e.in_schema:
            continue
        limit = e.limit.value if e.limit else ""
        lines.append(
            f"| {e.method} | `{openapi_path(e.path)}` | {_who(e)} | {e.status} | {limit} "
            f"| {e.summary} |"
        )
    lines += ["", END]
    return "\n".join(lines)


def api_contract_path() -> Path:
    return Path(__file__).resolve().parents[2] / "docs" / "API_CONTRACT.md"


def write_route_table(entries: Sequence[Endpoint], path: Path | None = None) -> Path:
    path = path or api_contract_path()
    text = path.read_text()
    start, end = text.index(BEGIN), text.index(END) + len(END)
    path.write_text(text[:start] + render_route_table(entries) + text[end:])
    return path
