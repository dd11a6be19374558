"""The dashboard's isolation matrix: every page, as viewer and admin, own vs foreign vs missing.

The two-tenant world of tests/test_web_isolation.py (both orgs have a queue "emails" and a
schedule "nightly"; B also has "b-only") is reused. For each page in DASHBOARD_PAGES that
needs a session:

- a GET with path parameters answers B's resource with the not-found page, exactly as it
  answers a missing one (status and text, request ids and tokens aside);
- a GET without parameters renders for A's viewer and never mentions B;
- a POST by A's viewer on A's own resource is refused (403) and changes nothing, in A or B;
- a POST by A's admin naming B's resource answers like a missing one, and B is unchanged.

Break it first: ``test_a_page_that_reads_past_the_api_is_caught`` adds a page that reads a
job by id without the project guard and shows the matrix failing for it.
"""

from __future__ import annotations

import re
from typing import Any

import psycopg
import pytest
from starlette.testclient import TestClient

from codity.web.access import Role
from codity.web.app import create_app
from codity.web.dashboard.page import Page
from codity.web.dashboard.routes import DASHBOARD_PAGES
from tests import test_web_isolation as api_matrix
from tests.dashboard import Session, sign_in
from tests.test_web_isolation import FOREIGN_MARK, MISSING_INT, MISSING_NAME, Side, _b_digest
from tests.webapp import SETTINGS

# The API matrix's two-tenant world, built once per module, a clone per test.
built = api_matrix.built
db_url = api_matrix.db_url
world = api_matrix.world

_PARAM = re.compile(r"\{(\w+)(?::\w+)?\}")
_VOLATILE = re.compile(
    r'(request [0-9a-f]{32}|name="csrf" value="[^"]*"|name="csrf-token" content="[^"]*")'
)

# Forms that a page of the project would send: the viewer's refusal must come from its role,
# not from a missing field.
_FORMS: dict[str, dict[str, str]] = {
    "POST /settings/members": {"email": "outsider@nowhere.test", "role": "viewer"},
    "POST /settings/members/{user_id:int}/role": {"role": "member"},
    "POST /settings/api-keys": {"name": "ci", "role": "viewer"},
    "POST /jobs/bulk": {"action": "retry", "ids": "1"},
    "POST /workflows/{workflow_id:int}/retry": {"mode": "failed"},
}

SIGNED_IN = [p for p in DASHBOARD_PAGES if p.signed_in and p.path != "/events"]
# Any signed-in user may sign out and switch to a project of theirs (a foreign project is
# tested by the API's matrix: /api/v1/auth/switch).
EVERYONE = {"POST /signout", "POST /switch"}


def _params(page: Page) -> list[str]:
    return _PARAM.findall(page.path)


def _value(page: Page, param: str, side: Side) -> Any:
    if param == "name":
        return (
            "nightly" if page.path.startswith(("/schedules", "/fragments/schedules")) else "emails"
        )
    if param == "job_id":
        return side.dead_job if page.path.endswith("/retry") else side.queued_job
    if param == "node_key":
        return "a"
    return {
        "dead_letter_id": side.dead_letter,
        "worker_id": side.worker,
        "user_id": side.spare_user,
        "key_id": side.spare_key,
        "project_id": side.extra_project,
        "workflow_id": side.workflow,
    }[param]


def _path(page: Page, values: dict[str, Any]) -> str:
    return _PARAM.sub(lambda m: str(values[m.group(1)]), page.path)


def _own(page: Page, a: Side) -> str:
    return _path(page, {p: _value(page, p, a) for p in _params(page)})


def _foreign(page: Page, b: Side) -> str:
    return _path(
        page, {p: FOREIGN_MARK if p == "name" else _value(page, p, b) for p in _params(page)}
    )


def _missing(page: Page) -> str:
    return _path(page, {p: MISSING_NAME if p == "name" else MISSING_INT for p in _params(page)})


def _stable(text: str) -> str:
    return _VOLATILE.sub("", text)


def matrix_failures(
    client: TestClient, conn: psycopg.Connection[Any], page: Page, a: Side, b: Side
) -> list[str]:
    failures: list[str] = []
    viewer = sign_in(client, conn, a.users[Role.VIEWER])
    admin = sign_in(client, conn, a.users[Role.ADMIN])
    b_before, a_before = _b_digest(conn, b), _b_digest(conn, a)

    def mentions_b(label: str, text: str) -> None:
        if FOREIGN_MARK in text or b.tenant.slug in text:
            failures.append(f"{label}: the page mentions tenant B")

    form = _FORMS.get(page.name, {})

    def send(session: Session, path: str) -> Any:
        if page.method == "GET":
            return session.get(path, follow_redirects=False)
        return session.post(path, form)

    if page.method == "GET" and not _params(page):
        # A confirmation page states the scope of an admin's action: a viewer gets none.
        want = 403 if page.path.endswith("/confirm") else 200
        got = viewer.get(page.path, follow_redirects=False)
        if got.status_code != want:
            failures.append(f"viewer own: got {got.status_code}, want {want}")
        mentions_b("viewer own", got.text)

    if _params(page):
        for label, session in (("viewer", viewer), ("admin", admin)):
            # A viewer's action is refused for its role before anything is looked up.
            want = 403 if page.method == "POST" and session is viewer else 404
            foreign, missing = send(session, _foreign(page, b)), send(session, _missing(page))
            if foreign.status_code != want:
                failures.append(f"{label} foreign: got {foreign.status_code}, want {want}")
            if (foreign.status_code, _stable(foreign.text)) != (
                missing.status_code,
                _stable(missing.text),
            ):
                failures.append(f"{label}: foreign and missing answer differently")
            mentions_b(f"{label} foreign", foreign.text)

    if page.method == "POST" and page.name not in EVERYONE:
        refused = viewer.post(_own(page, a), form)
        if refused.status_code != 403:
            failures.append(f"viewer own POST: got {refused.status_code}, want 403")
        if _b_digest(conn, a) != a_before:
            failures.append("a viewer's POST changed tenant A")

    if _b_digest(conn, b) != b_before:
        failures.append("tenant B's rows changed")
    return failures


@pytest.mark.parametrize("page", SIGNED_IN, ids=lambda p: p.name)
def test_page_hides_the_other_tenant_and_refuses_viewers(
    page: Page, db_url: str, conn: psycopg.Connection[Any], world: tuple[Side, Side]
) -> None:
    a, b = world
    with TestClient(create_app(db_url, SETTINGS)) as client:
        assert matrix_failures(client, conn, page, a, b) == []


def test_a_page_that_reads_past_the_api_is_caught(
    db_url: str, conn: psycopg.Connection[Any], world: tuple[Side, Side]
) -> None:
    """Break it first: a page reading a job by id with the superuser's connection, no guard."""
    a, b = world

    async def leaky(ctx: Any) -> Any:
        from starlette.responses import HTMLResponse

        with psycopg.connect(db_url) as raw:
            row = raw.execute(
                "SELECT j.task, q.name FROM codity.jobs j JOIN codity.queues q ON q.id = j.queue_id"
                " WHERE j.id = %s",
                [ctx.path_params["job_id"]],
            ).fetchone()
        if row is None:
            return HTMLResponse("not found", status_code=404)
        return HTMLResponse(f"{row[0]} in {row[1]}")

    page = Page("GET", "/leaky/{job_id:int}", leaky, "Leaky")
    conn.execute(
        "UPDATE codity.jobs SET task = %s WHERE id = %s", [f"{FOREIGN_MARK}.task", b.queued_job]
    )
    with TestClient(create_app(db_url, SETTINGS, pages=(*DASHBOARD_PAGES, page))) as client:
        assert matrix_failures(client, conn, page, a, b) != []
