"""schemathesis against the generated OpenAPI document: every operation, authenticated as
an org owner, fuzzed from its schema; no answer may be a 5xx, and every answer must match
the status codes and schemas the document declares.

The default run fuzzes each operation with a few examples (a smoke: every operation is
reached, the server is up, the checks run); the full run, marked ``fuzz`` and left to CI
(``./test -m fuzz``), takes CODITY_FUZZ_EXAMPLES (25) per operation, and with a larger
number is the long soak (docs/TESTING.md).

The app is served by ``codity web`` in a child process, not a thread of this one: CPython
3.11 keeps the AST converter's recursion counter per interpreter, so Jinja2 compiling a
template in a server thread while hypothesis parses a lambda's source here raised
``SystemError: AST constructor recursion depth mismatch`` (a CI run at 958d46c).
"""

from __future__ import annotations

import os
import urllib.request
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    response_schema_conformance,
    status_code_conformance,
)

from codity.web.access import Role
from tests.conftest import cloned
from tests.ports import free_port
from tests.processes import Processes, wait_until
from tests.webapp import SETTINGS, add_user, make_tenant

EXAMPLES = int(os.environ.get("CODITY_FUZZ_EXAMPLES") or 25)
SMOKE_EXAMPLES = 3


@pytest.fixture(scope="module")
def live_api(
    pg_server_url: str, template_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, dict[str, str]]]:
    with cloned(pg_server_url) as url:
        with psycopg.connect(url, autocommit=True) as conn:
            tenant = make_tenant(conn, "fuzz")
            owner = add_user(conn, tenant, Role.OWNER)
            conn.execute("SELECT * FROM codity.create_queue('emails', %s)", [tenant.project_id])
            conn.execute(
                "SELECT * FROM codity.enqueue('emails', 't', p_project_id => %s)",
                [tenant.project_id],
            )
        port = free_port()
        base_url = f"http://127.0.0.1:{port}"
        # The tests' own secret, so that the owner's token is one this server signed.
        with Processes(tmp_path_factory.mktemp("fuzz"), url,
                       JWT_SECRET=SETTINGS.jwt_secret.decode()) as processes:  # fmt: skip
            web = processes.start("web", ["web", "--host", "127.0.0.1", "--port", str(port)])
            wait_until(lambda: _serving(base_url), timeout=30,
                       what="the API answering /healthz", alive=[web])  # fmt: skip
            yield base_url, owner.headers


def _serving(base_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base_url}/healthz", timeout=2):
            return True
    except OSError:
        return False


@pytest.mark.parametrize(
    "examples",
    [
        pytest.param(SMOKE_EXAMPLES, id="smoke"),
        pytest.param(EXAMPLES, id="full", marks=pytest.mark.fuzz),
    ],
)
def test_fuzzing_every_operation_gives_no_5xx_and_matches_the_document(
    live_api: tuple[str, dict[str, str]], examples: int
) -> None:
    base_url, headers = live_api
    schema = schemathesis.openapi.from_url(f"{base_url}/api/v1/openapi.json")
    problems: list[str] = []
    operations = 0
    for result in schema.get_all_operations():
        operation = result.ok()  # type: ignore[union-attr]
        operations += 1

        @given(case=operation.as_strategy())
        @settings(
            max_examples=examples,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def run(case: Any) -> None:
            response = case.call(base_url=base_url, headers=headers)
            try:
                case.validate_response(
                    response,
                    checks=[not_a_server_error, status_code_conformance,
                            response_schema_conformance],
                )  # fmt: skip
            except Exception as exc:
                problems.append(
                    f"{case.method} {case.formatted_path}: {response.status_code} "
                    f"{type(exc).__name__}: {str(exc)[:300]}"
                )

        run()
    assert operations > 10
    assert problems == [], "\n".join(sorted(set(problems))[:30])
