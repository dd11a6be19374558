"""The schedules screen without a browser: every schedule with its cron in words, time
zone, next run and paused badge; one schedule's next runs and recent jobs; pause, resume and
"Run now" from the page for the roles allowed, refused for the others; another project's
schedule answered like a missing one.
"""

from __future__ import annotations

import re

import psycopg
import pytest

from codity.web.access import Role
from tests.dashboard import sign_in
from tests.test_web_schedules import add_queue, add_schedule
from tests.webapp import Tenant, add_user, make_tenant, web_client


@pytest.fixture
def tenant(conn: psycopg.Connection) -> Tenant:
    made = make_tenant(conn)
    add_queue(conn, made)
    add_schedule(conn, made, "nightly", "0 2 * * *", "Europe/London")
    add_schedule(conn, made, "often", "*/15 * * * *")
    return made


def _paused(conn: psycopg.Connection, tenant: Tenant, name: str) -> bool:
    row = conn.execute(
        "SELECT is_paused FROM codity.scheduled_jobs WHERE project_id = %s AND name = %s",
        [tenant.project_id, name],
    ).fetchone()
    assert row is not None
    return bool(row[0])


def _jobs_of(conn: psycopg.Connection, tenant: Tenant, name: str) -> list[tuple[int, str]]:
    return [
        (int(r[0]), str(r[1]))
        for r in conn.execute(
            "SELECT j.id, j.status::text FROM codity.jobs j"
            " JOIN codity.scheduled_jobs s ON s.id = j.schedule_id"
            " WHERE s.project_id = %s AND s.name = %s ORDER BY j.id",
            [tenant.project_id, name],
        ).fetchall()
    ]


def _no_request_id(text: str) -> str:
    return re.sub(r"request [0-9a-f]+", "request -", text)


@pytest.mark.parametrize("role", list(Role), ids=lambda r: r.label)
def test_every_role_reads_the_pages_and_sees_only_the_controls_its_role_allows(
    db_url: str, conn: psycopg.Connection, tenant: Tenant, role: Role
) -> None:
    user = add_user(conn, tenant, role)
    with web_client(db_url) as client:
        session = sign_in(client, conn, user)
        pages = {
            path: session.get(path)
            for path in (
                "/schedules",
                "/fragments/schedules",
                "/schedules/nightly",
                "/fragments/schedules/nightly",
            )
        }
    for path, page in pages.items():
        assert page.status_code == 200, (path, page.text)
        assert 'style="' not in page.text and "<script>" not in page.text
    listing = pages["/schedules"].text
    rows = re.findall(r'<tr id="schedule-([^"]+)" data-paused="(true|false)"', listing)
    assert rows == [("nightly", "false"), ("often", "false")]
    assert "At 02:00, every day" in listing and "Every 15 minutes" in listing
    assert "Europe/London" in listing and '<code class="cron">0 2 * * *</code>' in listing
    assert 'hx-trigger="codity:tick from:body, codity:changed from:body"' in listing

    detail = pages["/schedules/nightly"].text
    next_runs = re.search(r'<table id="schedule-next-runs">.*?</table>', detail, re.S)
    assert next_runs and next_runs.group(0).count("<time ") == 5
    assert "It has not enqueued a job yet." in detail
    assert ('id="schedule-run-now"' in detail) is (role >= Role.MEMBER)
    assert ('id="schedule-pause"' in detail) is (role >= Role.ADMIN)
    if role < Role.MEMBER:
        assert 'method="post" action="/schedules' not in detail


def test_an_admin_pauses_and_resumes_from_the_page(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    admin = add_user(conn, tenant, Role.ADMIN)
    with web_client(db_url) as client:
        session = sign_in(client, conn, admin)
        paused = session.post("/schedules/nightly/pause")
        assert paused.status_code == 303, paused.text
        assert paused.headers["location"] == "/schedules/nightly?done=paused"
        assert _paused(conn, tenant, "nightly")
        page = session.get(paused.headers["location"])
        assert "Paused." in page.text and 'data-paused="true"' in page.text
        assert 'id="schedule-resume"' in page.text and 'id="schedule-pause"' not in page.text
        listing = session.get("/schedules").text
        assert '<tr id="schedule-nightly" data-paused="true" class="paused">' in listing
        assert '<span class="badge warn">paused</span>' in listing

        resumed = session.post("/schedules/nightly/resume")
        assert resumed.headers["location"] == "/schedules/nightly?done=resumed"
        assert not _paused(conn, tenant, "nightly")


def test_run_now_enqueues_a_job_and_links_it(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    member = add_user(conn, tenant, Role.MEMBER)
    with web_client(db_url) as client:
        session = sign_in(client, conn, member)
        ran = session.post("/schedules/often/run")
        assert ran.status_code == 303, ran.text
        jobs = _jobs_of(conn, tenant, "often")
        assert [status for _, status in jobs] == ["queued"]
        job = jobs[0][0]
        assert ran.headers["location"] == f"/schedules/often?done=run&job={job}"
        page = session.get(ran.headers["location"])
        assert f'<a id="schedule-run-job" href="/jobs/{job}">job {job}</a>' in page.text
        assert f'<tr id="schedule-job-{job}" data-status="queued">' in page.text

        refused = session.post("/schedules/often/pause")
        assert refused.status_code == 403
        assert not _paused(conn, tenant, "often")
        crafted = session.get("/schedules/often?done=run&job=%3Cb%3E")
        assert "schedule-run-job" not in crafted.text and "Enqueued" not in crafted.text


def test_a_viewers_forged_posts_are_refused(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    viewer = add_user(conn, tenant, Role.VIEWER)
    with web_client(db_url) as client:
        session = sign_in(client, conn, viewer)
        for action in ("run", "pause", "resume"):
            assert session.post(f"/schedules/nightly/{action}").status_code == 403
        no_token = session.forge("/schedules/nightly/run", origin="http://testserver")
        assert no_token.status_code == 403
    assert _jobs_of(conn, tenant, "nightly") == []
    assert not _paused(conn, tenant, "nightly")


def test_another_projects_schedule_is_answered_like_a_missing_one(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    other = make_tenant(conn)
    add_queue(conn, other)
    add_schedule(conn, other, "secret")
    admin = add_user(conn, tenant, Role.ADMIN)
    with web_client(db_url) as client:
        session = sign_in(client, conn, admin)
        for template in ("/schedules/{}", "/fragments/schedules/{}"):
            foreign = session.get(template.format("secret"))
            missing = session.get(template.format("no-such"))
            assert foreign.status_code == missing.status_code == 404
            assert _no_request_id(foreign.text) == _no_request_id(missing.text)
        for action in ("run", "pause"):
            foreign = session.post(f"/schedules/secret/{action}")
            missing = session.post(f"/schedules/no-such/{action}")
            assert foreign.status_code == missing.status_code == 404
            assert _no_request_id(foreign.text) == _no_request_id(missing.text)
        assert "secret" not in session.get("/schedules").text
    assert _jobs_of(conn, other, "secret") == []
    assert not _paused(conn, other, "secret")
