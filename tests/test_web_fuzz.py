"""schemathesis against the generated OpenAPI document: every operation, authenticated as
an org owner, fuzzed from its schema; no answer may be a 5xx, and every answer must match
the status codes and schemas the document declares.

The default run fuzzes each operation with a few examples (a smoke: every operation is
reached, the server is up, the checks run); the full run, marked ``fuzz`` and left to CI
(``./test -m fuzz``), takes CODITY_FUZZ_EXAMPLES (25) per operation, and with a larger
number is the long soak (docs/TESTING.md).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import schemathesis
import uvicorn
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    response_schema_conformance,
    status_code_conformance,
)

from codity.web.access import Role
from codity.web.app import create_app
from tests.conftest import cloned
from tests.ports import free_port
from tests.webapp import SETTINGS, add_user, make_tenant

EXAMPLES = int(os.environ.get("CODITY_FUZZ_EXAMPLES") or 25)
SMOKE_EXAMPLES = 3


@pytest.fixture(scope="module")
def live_api(pg_server_url: str, template_url: str) -> Iterator[tuple[str, dict[str, str]]]:
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
        config = uvicorn.Config(
            create_app(url, SETTINGS), host="127.0.0.1", port=port, log_config=None,
            access_log=False, lifespan="on",
        )  # fmt: skip
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 20
        while not server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.05)
        try:
            yield f"http://127.0.0.1:{port}", owner.headers
        finally:
            server.should_exit = True
            thread.join(timeout=15)


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
