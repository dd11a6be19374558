"""The workflow page's actions, without a browser: a member sees the forms that fit the
workflow's state (a viewer none), and each form does what its API route does, then says so;
a forged or refused post changes nothing.

Workflows are made and driven through the SQL API as in tests/test_web_workflows.py.
"""

from __future__ import annotations

import psycopg
import pytest

from codity.web.access import Role
from tests.dashboard import sign_in
from tests.test_web_workflows import batch, diamond, enqueue_workflow, node, setup_project
from tests.webapp import Tenant, add_user, make_tenant, web_client

FORMS = ("workflow-seal", "workflow-retry-failed", "workflow-retry-downstream",
         "workflow-retry-all", "workflow-cancel")  # fmt: skip


@pytest.fixture
def tenant(conn: psycopg.Connection) -> Tenant:
    return make_tenant(conn)


@pytest.fixture
def worker(conn: psycopg.Connection, tenant: Tenant) -> int:
    return setup_project(conn, tenant)


def _statuses(conn: psycopg.Connection, workflow_id: int) -> dict[str, str]:
    rows = conn.execute(
        "SELECT node_key, status::text FROM codity.jobs WHERE workflow_id = %s", [workflow_id]
    ).fetchall()
    return dict(rows)


def _forms(html: str) -> set[str]:
    return {f for f in FORMS if f'id="{f}"' in html}


def test_a_member_sees_the_actions_that_fit_and_a_viewer_none(
    db_url: str, conn: psycopg.Connection, tenant: Tenant, worker: int
) -> None:
    failed = diamond(conn, tenant, worker, name="failed")  # right dead, load cancelled
    running = enqueue_workflow(conn, tenant, [node("a"), node("b", "a")], "running")
    opened = batch(conn, tenant, 2, sealed=False, name="open")
    member = add_user(conn, tenant, Role.MEMBER)
    viewer = add_user(conn, tenant, Role.VIEWER)
    with web_client(db_url) as client:
        as_member = sign_in(client, conn, member)
        pages = {f.id: as_member.get(f"/workflows/{f.id}").text for f in (failed, running, opened)}
        as_viewer = sign_in(client, conn, viewer)
        seen_by_viewer = as_viewer.get(f"/workflows/{failed.id}").text
    assert _forms(pages[failed.id]) == {
        "workflow-retry-failed", "workflow-retry-downstream", "workflow-retry-all",
    }  # fmt: skip
    skips = {key for key, job in failed.jobs.items() if f'id="skip-{job}"' in pages[failed.id]}
    assert skips == {"right", "load"}, "a dead and a cancelled node; not what completed"
    assert _forms(pages[running.id]) == {"workflow-cancel"}
    assert _forms(pages[opened.id]) == {"workflow-seal", "workflow-cancel"}
    assert _forms(seen_by_viewer) == set() and 'id="skip-' not in seen_by_viewer


def test_each_form_does_what_its_route_does_and_says_so(
    db_url: str, conn: psycopg.Connection, tenant: Tenant, worker: int
) -> None:
    flow = diamond(conn, tenant, worker)
    opened = batch(conn, tenant, 2, sealed=False, name="open")
    member = add_user(conn, tenant, Role.MEMBER)
    page = f"/workflows/{flow.id}"
    with web_client(db_url) as client:
        session = sign_in(client, conn, member)
        retried = session.post(page + "/retry", {"mode": "failed"})
        assert retried.status_code == 303, retried.text
        assert retried.headers["location"] == f"{page}?done=retry-failed&n=2"
        shown = session.get(retried.headers["location"]).text
        assert "Running 2 failed or cancelled node(s) again." in shown
        assert _statuses(conn, flow.id) == {
            "extract": "completed", "left": "completed", "right": "queued", "load": "waiting",
        }  # fmt: skip
        skipped = session.post(page + "/nodes/right/skip")
        assert skipped.headers["location"] == f"{page}?done=skip"
        assert _statuses(conn, flow.id)["right"] == "completed"
        assert _statuses(conn, flow.id)["load"] == "queued"
        cancelled = session.post(page + "/cancel")
        assert cancelled.headers["location"] == f"{page}?done=cancel&n=1"
        assert "Cancelled 1 unfinished job(s)." in session.get(cancelled.headers["location"]).text
        assert _statuses(conn, flow.id)["load"] == "cancelled"
        sealed = session.post(f"/workflows/{opened.id}/seal")
        assert sealed.headers["location"] == f"/workflows/{opened.id}?done=seal"
        assert 'id="workflow-seal"' not in session.get(f"/workflows/{opened.id}").text
    assert conn.execute(
        "SELECT sealed_at IS NOT NULL FROM codity.workflows WHERE id = %s", [opened.id]
    ).fetchone() == (True,)


def test_a_forged_or_refused_post_changes_nothing(
    db_url: str, conn: psycopg.Connection, tenant: Tenant, worker: int
) -> None:
    flow = diamond(conn, tenant, worker)
    viewer = add_user(conn, tenant, Role.VIEWER)
    member = add_user(conn, tenant, Role.MEMBER)
    before = _statuses(conn, flow.id)
    page = f"/workflows/{flow.id}"
    with web_client(db_url) as client:
        as_viewer = sign_in(client, conn, viewer)
        assert as_viewer.post(page + "/retry", {"mode": "all"}).status_code == 403
        assert as_viewer.post(page + "/cancel").status_code == 403
        as_member = sign_in(client, conn, member)
        no_csrf = as_member.forge(page + "/cancel", {}, origin="http://testserver")
        assert no_csrf.status_code == 403
        ran_already = as_member.post(page + "/nodes/left/skip")
        assert ran_already.status_code == 409, ran_already.text
        assert "only a node that is not running or done can be skipped" in ran_already.text
        bad_mode = as_member.post(page + "/retry", {"mode": "everything"})
        assert bad_mode.status_code == 422, bad_mode.text
    assert _statuses(conn, flow.id) == before
