"""The workflows screen without a browser (and, marked ``browser``, in one): the list by
state and kind, a workflow's graph drawn on the server with every node a link coloured by
its status and saying it in words, a batch's members, progress and callbacks, the collapsed
graph of a 10,000-node fan-out, the live fragment, the job page's link to its workflow, and
another project's workflow answered like a missing one.

Workflows and batches are made as in tests/test_web_workflows.py: through the SQL API,
``codity.enqueue_workflow`` and ``codity.create_batch``, driven as a worker would.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from playwright.sync_api import Browser, expect

from codity.web.access import Role
from tests.browser import LiveSystem, Watched, launch_chromium, live_system
from tests.conftest import cloned
from tests.dashboard import sign_in
from tests.sqlapi import one
from tests.test_web_workflows import (
    batch,
    diamond,
    enqueue_workflow,
    node,
    register,
    settle,
    setup_project,
)
from tests.webapp import Tenant, add_user, make_tenant, web_client

STATUSES = (
    "waiting",
    "scheduled",
    "queued",
    "claimed",
    "running",
    "completed",
    "dead_letter",
    "cancelled",
)


@pytest.fixture
def tenant(conn: psycopg.Connection) -> Tenant:
    return make_tenant(conn)


@pytest.fixture
def worker(conn: psycopg.Connection, tenant: Tenant) -> int:
    return setup_project(conn, tenant, "wf", "held")


def every_status(conn: psycopg.Connection, tenant: Tenant, worker: int) -> Any:
    """A workflow with a node in every status a node can rest in, and an edge of each
    policy. Roots in queue "held" are claimed (and some started and settled); the rest wait
    in queue "wf"."""
    flow = enqueue_workflow(
        conn,
        tenant,
        [
            node("done", queue="held"),
            node("dies", queue="held"),
            node("runs", queue="held"),
            node("claimed", queue="held"),
            node("queued"),
            {**node("later"), "run_at": "2999-01-01T00:00:00Z"},
            node("waits", "queued", {"key": "done", "on_failure": "ignore"}),
            node("cancelled", "dies"),
            node("held", {"key": "dies", "on_failure": "hold"}, "done"),
        ],
        "every status",
    )
    claimed: dict[int, int] = dict(
        conn.execute("SELECT job_id, fence FROM codity.claim(%s, 'held', 10)", [worker]).fetchall()
    )
    assert set(claimed) == {flow.jobs[k] for k in ("done", "dies", "runs", "claimed")}
    for key in ("done", "dies", "runs"):
        conn.execute(
            "SELECT * FROM codity.start(%s, %s)", [flow.jobs[key], claimed[flow.jobs[key]]]
        )
    conn.execute(
        "SELECT * FROM codity.complete(%s, %s)", [flow.jobs["done"], claimed[flow.jobs["done"]]]
    )
    conn.execute(
        "SELECT * FROM codity.fail(%s, %s, 'boom')", [flow.jobs["dies"], claimed[flow.jobs["dies"]]]
    )
    return flow


def _status_of(html: str, job: int) -> str:
    found = re.search(rf'<a class="wf-node status-(\w+) (\w+)" href="/jobs/{job}"', html)
    assert found, f"no node for job {job}"
    return found.group(1)


@pytest.mark.parametrize("role", list(Role), ids=lambda r: r.label)
def test_every_role_reads_the_workflow_pages_and_the_nav_leads_there(
    db_url: str, conn: psycopg.Connection, tenant: Tenant, worker: int, role: Role
) -> None:
    user = add_user(conn, tenant, role)
    flow = diamond(conn, tenant, worker)
    group = batch(conn, tenant, 3)
    with web_client(db_url) as client:
        session = sign_in(client, conn, user)
        pages = {
            path: session.get(path)
            for path in (
                "/workflows",
                "/workflows?state=failed&kind=workflow",
                "/fragments/workflows",
                f"/workflows/{flow.id}",
                f"/fragments/workflows/{flow.id}",
                f"/workflows/{group.id}",
                f"/fragments/workflows/{group.id}",
            )
        }
    for path, page in pages.items():
        assert page.status_code == 200, (path, page.text[:300])
        actions = [
            f
            for f in re.findall(r"<form[^>]*>", page.text)
            if 'action="/signout"' not in f and 'action="/switch"' not in f
        ]
        # Acting is for members and up (tests/test_dashboard_workflow_actions.py); the lists
        # have no action.
        if role < Role.MEMBER or "/workflows/" not in path:
            assert actions == [], (path, actions)
        else:
            assert all('method="post"' in f and "/workflows/" in f for f in actions), actions
    assert '<a href="/workflows" aria-current="page">Workflows</a>' in pages["/workflows"].text


def test_the_list_shows_state_kind_and_progress_and_filters_by_tab(
    db_url: str, conn: psycopg.Connection, tenant: Tenant, worker: int
) -> None:
    failed = diamond(conn, tenant, worker, name="nightly etl")
    running = enqueue_workflow(conn, tenant, [node("a"), node("b", "a")], "fresh")
    opened = batch(conn, tenant, 4, sealed=False, name="imports")
    viewer = add_user(conn, tenant, Role.VIEWER)
    with web_client(db_url) as client:
        session = sign_in(client, conn, viewer)
        everything = session.get("/workflows").text
        failing = session.get("/workflows?state=failed").text
        batches = session.get("/fragments/workflows?kind=batch").text
        bad_cursor = session.get("/workflows?cursor=nonsense")
    rows = re.findall(r'<tr id="workflow-(\d+)" data-state="(\w+)" data-kind="(\w+)"', everything)
    assert rows == [
        (str(opened.id), "open", "batch"),
        (str(running.id), "running", "workflow"),
        (str(failed.id), "failed", "workflow"),
    ]
    assert "nightly etl" in everything and "imports" in everything
    assert 'aria-current="page">All</a>' in everything
    # The failed diamond: 2 of 4 finished; its bar names every part in words.
    assert "4 of 4 finished: 2 completed, 1 dead or failed, 1 cancelled" in everything
    assert 'class="seg ok"' in everything and 'class="seg bad"' in everything
    assert re.findall(r'<tr id="workflow-(\d+)"', failing) == [str(failed.id)]
    assert 'id="tab-failed" aria-current="page"' in failing
    assert re.findall(r'<tr id="workflow-(\d+)"', batches) == [str(opened.id)]
    assert 'id="kind-batch" aria-current="true"' in batches
    assert bad_cursor.status_code == 422


def test_a_workflow_page_draws_every_node_as_a_link_in_its_status_colour_and_words(
    db_url: str, conn: psycopg.Connection, tenant: Tenant, worker: int
) -> None:
    flow = every_status(conn, tenant, worker)
    viewer = add_user(conn, tenant, Role.VIEWER)
    with web_client(db_url) as client:
        html = sign_in(client, conn, viewer).get(f"/workflows/{flow.id}").text
    graph = html[html.index('<figure class="wf-graph"') : html.index("</figure>")]
    assert 'data-collapsed="false"' in graph
    expected = {
        "done": "completed",
        "dies": "dead_letter",
        "runs": "running",
        "claimed": "claimed",
        "queued": "queued",
        "later": "scheduled",
        "waits": "waiting",
        "cancelled": "cancelled",
        "held": "waiting",
    }
    for key, status in expected.items():
        assert _status_of(graph, flow.jobs[key]) == status, key
        # Not colour only: the status is written in the box and in its accessible name.
        assert f'aria-label="{key}: {status.replace("_", " ")}, task t in queue' in graph
    for status in STATUSES:
        assert f"wf-node status-{status} " in graph, status
    for tone in ("ok", "bad", "warn", "muted", "queued", "idle"):
        assert re.search(rf'class="wf-node status-\w+ {tone}"', graph), tone
    for policy in ("cancel", "ignore", "hold"):
        assert f'class="wf-edge on-{policy} ' in graph, policy
    assert "resolved-dead_letter" in graph and "resolved-completed" in graph
    assert html.count('<tr id="node-') == 9, "every node in the table below"
    assert 'id="workflow-state"><span class="badge wf-state state-running warn">running' in html
    assert 'hx-trigger="codity:changed from:body"' in html, "the graph re-renders live"


def test_the_state_badge_says_held_failed_and_completed(
    db_url: str, conn: psycopg.Connection, tenant: Tenant, worker: int
) -> None:
    held = diamond(conn, tenant, worker, policy="hold", name="held")
    failed = diamond(conn, tenant, worker, name="failed")
    done = enqueue_workflow(conn, tenant, [node("only")], "done")
    settle(conn, worker, {done.jobs["only"]: "complete"})
    viewer = add_user(conn, tenant, Role.VIEWER)
    with web_client(db_url) as client:
        session = sign_in(client, conn, viewer)
        pages = {f.id: session.get(f"/workflows/{f.id}").text for f in (held, failed, done)}
    for flow, state, tone in (
        (held, "held", "warn"),
        (failed, "failed", "bad"),
        (done, "completed", "ok"),
    ):
        assert f'class="badge wf-state state-{state} {tone}">{state}<' in pages[flow.id]


def test_a_batch_page_shows_member_counts_progress_callbacks_and_its_seal(
    db_url: str, conn: psycopg.Connection, tenant: Tenant, worker: int
) -> None:
    group = batch(conn, tenant, 6, name="imports")
    members = [group.jobs[f"m{i}"] for i in range(1, 7)]
    settle(
        conn,
        worker,
        {m: "fail" if m == members[0] else "complete" for m in members[:4]}
        | {m: "complete" for m in members[4:]},
    )
    settle(conn, worker, {group.jobs["all_done"]: "complete"})
    opened = batch(conn, tenant, 2, sealed=False, name="still open")
    viewer = add_user(conn, tenant, Role.VIEWER)
    with web_client(db_url) as client:
        session = sign_in(client, conn, viewer)
        html = session.get(f"/workflows/{group.id}").text
        open_html = session.get(f"/workflows/{opened.id}").text
    assert "<h1>Batch" in html and "wf-graph" not in html
    assert 'data-status="completed" data-count="5"' in html
    assert 'data-status="dead_letter" data-count="1"' in html
    assert "6 of 6 finished: 5 completed, 1 dead or failed" in html
    callbacks = dict(re.findall(r'<tr id="callback-(\w+)" data-status="(\w+)"', html))
    assert callbacks == {
        "all_done": "completed",
        "all_succeeded": "cancelled",
        "any_dead": "queued",
    }
    for status in ("queued", "cancelled", "completed", "dead_letter"):
        assert f"badge status-{status}" in html, status
    assert html.count('<tr id="node-') == 6, "members only; callbacks have their own table"
    assert 'data-open="false"' in html and 'id="batch-open"' not in html
    assert 'data-open="true"' in open_html and 'id="batch-open"' in open_html
    assert 'state-open">open<' in open_html


def test_a_ten_thousand_node_fan_out_renders_collapsed_into_a_small_page(
    db_url: str, conn: psycopg.Connection, tenant: Tenant, worker: int
) -> None:
    nodes = [node("root")] + [node(f"leaf-{i}", "root", task="leaf") for i in range(9_999)]
    flow = enqueue_workflow(conn, tenant, nodes, "fan-out")
    viewer = add_user(conn, tenant, Role.VIEWER)
    with web_client(db_url) as client:
        session = sign_in(client, conn, viewer)
        session.get("/workflows")  # the app warmed up: templates compiled, pool open
        started = time.perf_counter()
        page = session.get(f"/workflows/{flow.id}")
        took = time.perf_counter() - started
        started = time.perf_counter()
        fragment = session.get(f"/fragments/workflows/{flow.id}")
        fragment_took = time.perf_counter() - started
    print(
        f"\n10,000-node workflow page: {took * 1000:.0f} ms, {len(page.content):,} bytes;"
        f" its live fragment {fragment_took * 1000:.0f} ms, {len(fragment.content):,} bytes"
    )
    assert page.status_code == 200 and fragment.status_code == 200
    assert 'data-collapsed="true"' in page.text
    assert re.findall(r"\u00d7[\d,]+ \w+", page.text) == ["\u00d71 queued", "\u00d79,999 waiting"]
    assert "10,000 nodes in 2 layers, 9,999 edges, collapsed into 2 groups" in page.text
    assert page.text.count('<tr id="node-') == 200
    assert "Showing 200 of 10,000" in page.text
    assert len(page.content) < 120_000


def test_the_live_fragment_shows_a_node_that_moved(
    db_url: str, conn: psycopg.Connection, tenant: Tenant, worker: int
) -> None:
    flow = diamond(conn, tenant, worker, run=False)
    viewer = add_user(conn, tenant, Role.VIEWER)
    with web_client(db_url) as client:
        session = sign_in(client, conn, viewer)
        before = session.get(f"/fragments/workflows/{flow.id}").text
        settle(conn, worker, {flow.jobs["extract"]: "complete"})
        after = session.get(f"/fragments/workflows/{flow.id}").text
    assert _status_of(before, flow.jobs["extract"]) == "queued"
    assert _status_of(before, flow.jobs["left"]) == "waiting"
    assert _status_of(after, flow.jobs["extract"]) == "completed"
    assert _status_of(after, flow.jobs["left"]) == "queued"
    assert "<html" not in after, "a fragment, not a page"


def test_a_job_page_links_to_its_workflow_and_node(
    db_url: str, conn: psycopg.Connection, tenant: Tenant, worker: int
) -> None:
    flow = diamond(conn, tenant, worker, run=False)
    group = batch(conn, tenant, 1, name="imports")
    plain = one(
        conn,
        "SELECT job_id FROM codity.enqueue('wf', 't', p_project_id => %s)",
        [tenant.project_id],
    )
    viewer = add_user(conn, tenant, Role.VIEWER)
    with web_client(db_url) as client:
        session = sign_in(client, conn, viewer)
        of_node = session.get(f"/jobs/{flow.jobs['load']}").text
        of_member = session.get(f"/jobs/{group.jobs['m1']}").text
        of_callback = session.get(f"/jobs/{group.jobs['all_done']}").text
        of_plain = session.get(f"/jobs/{plain}").text
    assert (
        f'Workflow: <a href="/workflows/{flow.id}">diamond</a>, node <code>load</code>' in of_node
    )
    assert f'Batch: <a href="/workflows/{group.id}">imports</a>, a member' in of_member
    assert "node <code>all_done</code>" in of_callback
    assert 'id="job-workflow"' not in of_plain


def test_another_projects_workflow_is_the_not_found_page(
    db_url: str, conn: psycopg.Connection, tenant: Tenant, worker: int
) -> None:
    other = make_tenant(conn)
    theirs = diamond(conn, other, setup_project(conn, other), name="b-only")
    viewer = add_user(conn, tenant, Role.VIEWER)
    with web_client(db_url) as client:
        session = sign_in(client, conn, viewer)
        foreign = session.get(f"/workflows/{theirs.id}")
        missing = session.get("/workflows/8999999999")
        fragment = session.get(f"/fragments/workflows/{theirs.id}")
    assert foreign.status_code == missing.status_code == fragment.status_code == 404
    assert "workflow not found" in foreign.text
    assert "b-only" not in foreign.text + fragment.text


# ---------------------------------------------------------------------------------------
# In a browser: screenshots for the docs
# ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def system(
    pg_server_url: str, template_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveSystem]:
    with cloned(pg_server_url) as url, live_system(url, tmp_path_factory.mktemp("logs")) as live:
        yield live


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with launch_chromium() as launched:
        yield launched


@pytest.mark.browser
def test_a_workflow_fills_in_live_and_each_screen_is_photographed(
    browser: Browser, system: LiveSystem
) -> None:
    """The demo project gets queues no demo worker serves, an ETL diamond whose right
    branch dies (its join cancelled), a wider workflow still running, and a batch of 40
    with one dead member and 6 still queued. The diamond's page shows extract completing
    without a reload."""
    with psycopg.connect(system.db_url, autocommit=True) as conn:
        project = one(conn, "SELECT project_id FROM codity.queues WHERE name = 'emails'")
        tenant = Tenant(0, int(project), "demo")
        worker = setup_project(conn, tenant, "wf", "imports")
        flow = diamond(conn, tenant, worker, run=False, name="nightly etl")
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        operator = Watched.open(context, system.url)
        operator.sign_in()
        page = operator.page
        operator.goto(f"/workflows/{flow.id}")
        expect(page.locator("main h1")).to_contain_text("nightly etl")
        extract = page.locator(f'a.wf-node[href="/jobs/{flow.jobs["extract"]}"]')
        expect(extract).to_have_class(re.compile(r"status-queued"))
        with psycopg.connect(system.db_url, autocommit=True) as conn:
            worker = register(conn, tenant, "wf")  # the first one may be swept as silent
            settle(conn, worker, {flow.jobs["extract"]: "complete"})
        expect(extract).to_have_class(re.compile(r"status-completed"), timeout=5_000)
        with psycopg.connect(system.db_url, autocommit=True) as conn:
            worker = register(conn, tenant, "wf", "imports")
            settle(conn, worker, {flow.jobs["left"]: "complete", flow.jobs["right"]: "fail"})
            wide = enqueue_workflow(
                conn,
                tenant,
                [
                    node("fetch"),
                    *(node(f"shard-{i}", "fetch", task="transform") for i in range(6)),
                    node("merge", *(f"shard-{i}" for i in range(6)), task="merge"),
                    node("report", "merge", task="report"),
                    node("notify", {"key": "merge", "on_failure": "ignore"}, task="notify"),
                ],
                "daily report",
            )
            settle(conn, worker, {wide.jobs["fetch"]: "complete"})
            settle(conn, worker, dict.fromkeys((wide.jobs[f"shard-{i}"] for i in range(6)),
                                               "complete"))  # fmt: skip
            group = batch(conn, tenant, 40, name="import customers", queue="imports")
            members = [group.jobs[f"m{i}"] for i in range(1, 35)]
            outcomes = {m: "fail" if m == members[6] else "complete" for m in members}
            settle(conn, worker, outcomes, queue="imports")
        operator.goto(f"/workflows/{flow.id}")
        load = page.locator(f'a.wf-node[href="/jobs/{flow.jobs["load"]}"]')
        expect(load).to_have_class(re.compile(r"status-cancelled"))
        expect(page.locator("#workflow-state")).to_contain_text("failed")
        assert page.locator("a.wf-node").count() == 4
        operator.assert_clean()
        operator.screenshot("workflow")
        load.focus()
        assert page.evaluate("document.activeElement.getAttribute('href')") == (
            f"/jobs/{flow.jobs['load']}"
        ), "a node is a link the keyboard reaches"
        named = "Array.from(document.querySelectorAll('a.wf-node')).map(a => a.ariaLabel)"
        assert all(page.evaluate(named)), "every node has a name a screen reader can say"
        load.click()
        expect(page.locator("#job-workflow")).to_contain_text("node load")
        operator.assert_clean()
        operator.goto("/workflows")
        expect(page.locator(f"#workflow-{group.id}")).to_have_attribute("data-state", "running")
        expect(page.locator(f"#workflow-{flow.id}")).to_have_attribute("data-state", "failed")
        operator.assert_clean()
        operator.screenshot("workflows")
        operator.goto(f"/workflows/{group.id}")
        expect(page.locator("#batch-callbacks")).to_be_visible()
        expect(page.locator("#callback-all_succeeded")).to_have_attribute(
            "data-status", "cancelled"
        )
        operator.assert_clean()
        operator.screenshot("batch")
    finally:
        context.close()
