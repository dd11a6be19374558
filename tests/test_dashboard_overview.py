"""The overview screen, server-side: it renders for every role, shows capped counts as
"10,000+", draws each queue's last hour as SVG bars that match the executions, lists the
problem queues with their reasons, and re-renders live at most once every ~2 s."""

from __future__ import annotations

import re
from typing import Any

import psycopg
import pytest

from codity.web.access import Role
from codity.web.dashboard.screens.overview import THROUGHPUT, Series, bar_chart
from tests.dashboard import sign_in
from tests.sqlapi import one
from tests.test_web_overview import enqueue, finish, live_worker, queue
from tests.webapp import Tenant, add_user, make_tenant, web_client

Conn = psycopg.Connection[Any]
INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.IGNORECASE)


def assert_csp_clean(html: str) -> None:
    assert INLINE_SCRIPT.search(html) is None, "no inline script"
    assert re.search(r"\sstyle=", html) is None, "no style attribute"


@pytest.fixture
def tenant(conn: Conn) -> Tenant:
    made = make_tenant(conn)
    queue(conn, made, "emails")
    queue(conn, made, "reports")
    return made


@pytest.mark.parametrize("role", [Role.VIEWER, Role.MEMBER, Role.ADMIN])
def test_the_overview_and_its_fragment_render_for_every_role(
    db_url: str, conn: Conn, tenant: Tenant, role: Role
) -> None:
    enqueue(conn, tenant, "emails", 2)
    live_worker(conn, tenant, ["emails"])
    other = make_tenant(conn)
    queue(conn, other, "foreign-queue")
    with web_client(db_url) as client:
        session = sign_in(client, conn, add_user(conn, tenant, role))
        page = session.get("/")
        fragment = session.get("/fragments/overview")
    assert page.status_code == 200 and fragment.status_code == 200
    for html in (page.text, fragment.text):
        assert ">emails</a>" in html and ">reports</a>" in html
        assert "foreign-queue" not in html
        assert "Problem queues" in html and '<svg class="chart"' in html
        assert_csp_clean(html)
    assert '<link rel="stylesheet" href="/static/overview.css">' in page.text
    assert "<html" not in fragment.text, "a fragment is not a whole page"
    assert 'action="/queues/' not in page.text, "the overview has no action controls"


def test_the_overview_refreshes_on_changes_and_ticks_at_most_every_two_seconds(
    db_url: str, conn: Conn, tenant: Tenant
) -> None:
    with web_client(db_url) as client:
        page = sign_in(client, conn, add_user(conn, tenant, Role.VIEWER)).get("/")
    trigger = re.search(r'hx-get="/fragments/overview" hx-trigger="([^"]+)"', page.text)
    assert trigger is not None
    specs = [s.strip() for s in trigger.group(1).split(",")]
    assert specs == [
        "codity:changed from:body throttle:1900ms",
        "codity:tick from:body throttle:1900ms",
    ]
    assert 'data-live="on"' in page.text


def test_capped_counts_read_ten_thousand_plus(db_url: str, conn: Conn, tenant: Tenant) -> None:
    queue_id = one(conn, "SELECT id FROM codity.queues WHERE name = 'emails'")
    conn.execute(
        "INSERT INTO codity.jobs (queue_id, project_id, task, status, run_at, max_attempts)"
        " SELECT q.id, q.project_id, 'bulk', 'queued', now() - interval '1 minute', 1"
        " FROM codity.queues q, generate_series(1, 10001) WHERE q.id = %s",
        [queue_id],
    )
    enqueue(conn, tenant, "reports", 3)
    with web_client(db_url) as client:
        html = sign_in(client, conn, add_user(conn, tenant, Role.VIEWER)).get("/").text
    # Break it first: without the cap the page would read "10,001" and no "+".
    assert '<td class="num">10,000+</td>' in html
    assert "<dt>Claimable</dt><dd>10,003+</dd>" in html, "the total is a sum of capped counts"
    assert '<td class="num">3</td>' in html
    assert "10,001" not in html


def test_the_last_hour_chart_draws_each_minutes_completed_and_failed(
    db_url: str, conn: Conn, tenant: Tenant
) -> None:
    minute = one(conn, "SELECT date_trunc('minute', now()) - interval '20 minutes'")
    finish(conn, tenant, "emails", minute, n=3)
    finish(conn, tenant, "emails", minute, fail=True)
    conn.execute("SELECT codity.roll_up()")
    finish(conn, tenant, "reports", n=2)  # live, not rolled up yet
    live_minute = one(conn, "SELECT date_trunc('minute', max(finished_at)) FROM codity.jobs")
    with web_client(db_url) as client:
        html = sign_in(client, conn, add_user(conn, tenant, Role.VIEWER)).get("/").text
    label = f"{minute:%H:%M} UTC"
    bars = re.findall(r'<rect class="(done|failed)"[^>]*><title>([^<]+)</title>', html)
    assert ("done", f"{label}: 3 completed") in bars
    assert ("failed", f"{label}: 1 failed") in bars
    assert ("done", f"{live_minute:%H:%M} UTC: 2 completed") in bars
    assert len(bars) == 3
    assert "3 completed, 1 failed; busiest " + label + " with 4." in html
    assert "2 completed, 0 failed; busiest" in html
    assert 'role="img" aria-labelledby="tp-0-t tp-0-d"' in html


def test_problem_queues_are_listed_with_their_reasons(
    db_url: str, conn: Conn, tenant: Tenant
) -> None:
    viewer = add_user(conn, tenant, Role.VIEWER)
    with web_client(db_url) as client:
        session = sign_in(client, conn, viewer)
        calm = session.get("/fragments/overview").text
        enqueue(conn, tenant, "emails", 2)
        conn.execute("SELECT codity.pause_queue('reports', %s)", [tenant.project_id])
        flagged = session.get("/fragments/overview").text
    assert "No problems." in calm
    assert "No problems." not in flagged
    problems = flagged.split('<ul class="problems">', 1)[1].split("</section>", 1)[0]
    assert '<a href="/queues/emails">emails</a>' in problems
    assert "2 claimable, and no live worker serves this queue." in problems
    assert '<a href="/queues/reports">reports</a>' in problems
    assert "Paused: workers claim nothing from it." in problems


def test_a_chart_scales_bars_to_the_busiest_point_and_says_so_in_words() -> None:
    points = [
        {"label": "12:00 UTC", "completed": 4, "failed": 0},
        {"label": "12:01 UTC", "completed": 0, "failed": 0},
        {"label": "12:02 UTC", "completed": 1, "failed": 1},
    ]
    chart = bar_chart("c", "t", points, THROUGHPUT, kind="sum", height=42)
    assert [(b.x, b.y, b.height, b.css) for b in chart.bars] == [
        (0, 2.0, 40.0, "done"),
        (20, 32.0, 10.0, "done"),
        (20, 22.0, 10.0, "failed"),
    ], "the busiest minute fills the chart; a minute's failures stack on its completions"
    assert chart.summary == "5 completed, 1 failed; busiest 12:00 UTC with 4."
    level = bar_chart(
        "d", "t", points, (Series("completed", "x", "claimable"),), kind="level", height=42
    )
    assert level.summary == "Latest (12:02 UTC): 1 claimable. Peak 4 claimable at 12:00 UTC."
