"""The queues screens without a browser: the list and one queue with its retry policy, lease
and timeout, live counts and depth over time; pause and resume by admins through the
dashboard, refused for members and viewers even when their POST is well formed; the
history's window checked; another project's queue read exactly like a missing one.
"""

from __future__ import annotations

import re
from typing import Any

import psycopg
import pytest

from codity.web.access import Role
from tests.dashboard import sign_in
from tests.sqlapi import NO_BACKOFF, create_queue, one
from tests.test_web_overview import enqueue
from tests.webapp import Tenant, add_user, make_tenant, web_client

Conn = psycopg.Connection[Any]
INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.IGNORECASE)


@pytest.fixture
def tenant(conn: Conn) -> Tenant:
    made = make_tenant(conn)
    create_queue(
        conn,
        "emails",
        project_id=made.project_id,
        max_attempts=7,
        lease_seconds=45,
        job_timeout_seconds=90,
        **NO_BACKOFF,
    )
    return made


def _paused(conn: Conn, tenant: Tenant, name: str = "emails") -> bool:
    return bool(
        one(
            conn,
            "SELECT is_paused FROM codity.queues WHERE project_id = %s AND name = %s",
            [tenant.project_id, name],
        )
    )


def _posts(html: str) -> set[str]:
    return set(re.findall(r'<form method="post" action="([^"]+)"', html)) - {"/signout", "/switch"}


def _without_request_id(html: str) -> str:
    return re.sub(r"request [0-9a-zA-Z-]+", "request …", html)


@pytest.mark.parametrize("role", list(Role), ids=lambda r: r.label)
def test_every_role_reads_the_queue_pages_and_only_admins_get_pause(
    db_url: str, conn: Conn, tenant: Tenant, role: Role
) -> None:
    enqueue(conn, tenant, "emails", 3)
    with web_client(db_url) as client:
        session = sign_in(client, conn, add_user(conn, tenant, role))
        pages = {
            path: session.get(path)
            for path in (
                "/queues",
                "/fragments/queues",
                "/queues/emails",
                "/queues/emails?range=6h",
                "/queues/emails?range=24h",
                "/fragments/queues/emails",
            )
        }
    for path, page in pages.items():
        assert page.status_code == 200, (path, page.text)
        assert INLINE_SCRIPT.search(page.text) is None, path
        assert re.search(r"\sstyle=", page.text) is None, path
    listing = pages["/queues"].text
    assert '<a href="/queues/emails">emails</a>' in listing
    assert "7 attempts, fixed backoff" in listing and "lease 45.0 s; timeout 1 min 30 s" in listing
    detail = pages["/queues/emails"].text
    assert "<dt>Max attempts</dt><dd>7</dd>" in detail
    assert "<dt>Lease</dt><dd>45.0 s</dd>" in detail
    assert "<dt>Job timeout</dt><dd>1 min 30 s</dd>" in detail
    assert "<dt>Claimable</dt><dd>3</dd>" in pages["/fragments/queues/emails"].text
    assert 'hx-get="/fragments/queues/emails"' in detail
    assert '<link rel="stylesheet" href="/static/queues.css">' in detail
    forms = _posts(detail)
    if role >= Role.ADMIN:
        assert forms == {"/queues/emails/pause", "/queues/emails/limits"}
        form = detail.split('action="/queues/emails/pause"', 1)[1].split("</form>", 1)[0]
        assert 'name="csrf"' in form and "data-confirm" in detail
    else:
        assert forms == set(), "members and viewers get no pause, resume or limits control"
    assert _posts(listing) == set()


def test_an_admin_pauses_and_resumes_a_queue_through_the_dashboard(
    db_url: str, conn: Conn, tenant: Tenant
) -> None:
    with web_client(db_url) as client:
        session = sign_in(client, conn, add_user(conn, tenant, Role.ADMIN))
        paused = session.post("/queues/emails/pause")
        after_pause = _paused(conn, tenant)
        page = session.get("/queues/emails").text
        resumed = session.post("/queues/emails/resume")
    assert paused.status_code == 303 and paused.headers["location"] == "/queues/emails"
    assert after_pause is True
    assert _posts(page) == {"/queues/emails/resume", "/queues/emails/limits"}, (
        "a paused queue offers resume"
    )
    assert '<span class="badge warn">paused</span>' in page
    assert resumed.status_code == 303
    assert _paused(conn, tenant) is False


@pytest.mark.parametrize("role", [Role.VIEWER, Role.MEMBER], ids=lambda r: r.label)
def test_pause_and_resume_are_refused_for_members_and_viewers_even_when_forged(
    db_url: str, conn: Conn, tenant: Tenant, role: Role
) -> None:
    with web_client(db_url) as client:
        session = sign_in(client, conn, add_user(conn, tenant, role))
        forged = session.post("/queues/emails/pause")  # right Origin, right CSRF token
        still_running = not _paused(conn, tenant)
        conn.execute("SELECT codity.pause_queue('emails', %s)", [tenant.project_id])
        forged_resume = session.post("/queues/emails/resume")
    assert forged.status_code == 403 and forged_resume.status_code == 403
    assert "Not allowed" in forged.text
    assert still_running, "a refused pause changed nothing"
    assert _paused(conn, tenant), "a refused resume changed nothing"


def test_a_pause_without_the_csrf_token_or_from_another_site_is_refused(
    db_url: str, conn: Conn, tenant: Tenant
) -> None:
    with web_client(db_url) as client:
        session = sign_in(client, conn, add_user(conn, tenant, Role.OWNER))
        no_token = session.forge("/queues/emails/pause", {}, origin="http://testserver")
        elsewhere = session.forge(
            "/queues/emails/pause", {"csrf": session.csrf}, origin="https://evil.example"
        )
    assert no_token.status_code == 403 and elsewhere.status_code == 403
    assert not _paused(conn, tenant)


def test_the_depth_chart_draws_the_rolled_up_minutes(
    db_url: str, conn: Conn, tenant: Tenant
) -> None:
    queue_id = one(conn, "SELECT id FROM codity.queues WHERE name = 'emails'")
    minute = one(conn, "SELECT date_trunc('minute', now()) - interval '3 minutes'")
    conn.execute(
        "INSERT INTO codity.queue_minutes"
        " (queue_id, project_id, minute, completed, claimable, running)"
        " SELECT id, project_id, %s, 4, 7, 2 FROM codity.queues WHERE id = %s",
        [minute, queue_id],
    )
    conn.execute("UPDATE codity.rollup_state SET rolled_until = date_trunc('minute', now())")
    with web_client(db_url) as client:
        html = sign_in(client, conn, add_user(conn, tenant, Role.VIEWER)).get("/queues/emails")
    bars = re.findall(r'<rect class="([a-z]+)"[^>]*><title>([^<]+)</title>', html.text)
    label = f"{minute:%H:%M} UTC"
    assert ("claimable", f"{label}: 7 claimable") in bars
    assert ("running", f"{label}: 2 running") in bars
    assert ("done", f"{label}: 4 completed") in bars
    assert len(bars) == 3, "minutes with nothing draw nothing"
    assert f"Peak 7 claimable at {label}." in html.text


def test_the_history_window_is_checked_on_the_api_and_the_page(
    db_url: str, conn: Conn, tenant: Tenant
) -> None:
    viewer = add_user(conn, tenant, Role.VIEWER)
    with web_client(db_url) as client:
        answers = {
            minutes: client.get(
                "/api/v1/queues/emails/history",
                params={"minutes": minutes},
                headers=viewer.headers,
            )
            for minutes in ("4", "5", "1440", "1441", "0", "soon")
        }
        page = sign_in(client, conn, viewer).get("/queues/emails?range=7d")
    for minutes in ("4", "1441", "0", "soon"):
        assert answers[minutes].status_code == 422, minutes
        assert answers[minutes].json()["error"]["details"][0]["location"] == ["query", "minutes"]
    assert len(answers["5"].json()["data"]["points"]) == 5
    assert len(answers["1440"].json()["data"]["points"]) == 1440
    assert page.status_code == 422 and "range must be one of 1h, 6h, 24h" in page.text


def test_another_projects_queue_reads_exactly_like_a_missing_one(
    db_url: str, conn: Conn, tenant: Tenant
) -> None:
    other = make_tenant(conn)
    create_queue(conn, "foreign-queue", project_id=other.project_id, **NO_BACKOFF)
    with web_client(db_url) as client:
        session = sign_in(client, conn, add_user(conn, tenant, Role.OWNER))
        pairs = [
            (session.get(f"/queues/{name}"), session.get(f"/fragments/queues/{name}"))
            for name in ("foreign-queue", "no-such-queue")
        ]
        posts = [session.post(f"/queues/{name}/pause") for name in ("foreign-queue", "no-q")]
    (page_f, frag_f), (page_m, frag_m) = pairs
    for answer in (page_f, frag_f, page_m, frag_m, *posts):
        assert answer.status_code == 404
    for foreign, missing in ((page_f, page_m), (frag_f, frag_m), tuple(posts)):
        assert "foreign-queue" not in foreign.text
        assert _without_request_id(foreign.text) == _without_request_id(missing.text)
    assert not _paused(conn, other, "foreign-queue"), "a foreign pause changed nothing"
