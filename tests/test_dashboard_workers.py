"""The workers screen without a browser: every page and fragment for every role, a dead or
stale worker's row red with its liveness in the markup and its uptime frozen, a dead
worker's jobs shown going back to the queue, and another project's worker answered like a
missing one.

Workers are driven through the SQL API as in tests/test_web_worker_detail.py (time moved
with ``p_now``, a stale heartbeat set back as the database's owner).
"""

from __future__ import annotations

import re
from typing import Any

import psycopg
import pytest

from codity.web.access import Role
from tests.dashboard import sign_in
from tests.sqlapi import one
from tests.test_web_worker_detail import (
    dead_worker_with_reaped_job,
    enqueue,
    exact_uptime,
    hold,
    queue,
    register,
)
from tests.webapp import Tenant, add_user, make_tenant, web_client


@pytest.fixture
def tenant(conn: psycopg.Connection) -> Tenant:
    made = make_tenant(conn)
    queue(conn, made)
    return made


def _row(html: str, worker: int) -> str:
    """The table row of one worker."""
    found = re.search(rf'<tr id="worker-{worker}"[^>]*>.*?</tr>', html, re.S)
    assert found, html
    return found.group(0)


def _uptime(html: str) -> str:
    found = re.search(r'class="num uptime" data-seconds="(\d+)">([^<]*)<', html)
    assert found, html
    return f"{found.group(1)} {found.group(2)}"


def _stale(conn: psycopg.Connection, tenant: Tenant) -> int:
    """Started an hour ago, silent for 12 s: two heartbeats missed, not yet dead."""
    worker = register(conn, tenant, "stale")
    conn.execute(
        "UPDATE codity.workers SET started_at = now() - interval '1 hour',"
        " last_heartbeat_at = now() - interval '12 seconds' WHERE id = %s",
        [worker],
    )
    return worker


@pytest.mark.parametrize("role", list(Role), ids=lambda r: r.label)
def test_every_role_reads_the_workers_pages_and_none_gets_an_action_control(
    db_url: str, conn: psycopg.Connection, tenant: Tenant, role: Role
) -> None:
    user = add_user(conn, tenant, role)
    alive = register(conn, tenant, "alive-one")
    enqueue(conn, tenant)
    job, _ = hold(conn, alive)
    with web_client(db_url) as client:
        session = sign_in(client, conn, user)
        pages = {
            path: session.get(path)
            for path in (
                "/workers",
                "/workers?show=live",
                "/fragments/workers",
                f"/workers/{alive}",
                f"/fragments/workers/{alive}",
            )
        }
    for path, page in pages.items():
        assert page.status_code == 200, (path, page.text)
        assert "style=" not in page.text and "<script>" not in page.text, path
        forms = re.findall(r'<form method="post" action="([^"]+)"', page.text)
        assert set(forms) <= {"/signout", "/switch"}, (path, forms)
    listing = pages["/workers"].text
    row = _row(listing, alive)
    assert 'data-liveness="alive"' in row and 'class="liveness-alive"' in row
    assert '<span class="badge ok">alive</span>' in row
    assert f'<a href="/jobs?worker_id={alive}">1</a>' in row
    assert "host-a" in row and "4242" in row and "emails" in row
    assert 'hx-trigger="codity:tick from:body, codity:changed from:body"' in listing
    assert 'hx-get="/fragments/workers?show=all"' in listing
    assert 'href="/static/workers.css"' in listing and 'data-live="on"' in listing
    assert 'hx-get="/fragments/workers?show=live"' in pages["/workers?show=live"].text
    detail = pages[f"/workers/{alive}"].text
    assert f'<a href="/jobs/{job}">{job}</a>' in detail
    assert f'hx-get="/fragments/workers/{alive}"' in detail
    assert "Jobs returned to the queue" not in detail


def test_a_stale_worker_turns_red_and_its_uptime_stops(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    viewer = add_user(conn, tenant, Role.VIEWER)
    stale = _stale(conn, tenant)
    with web_client(db_url) as client:
        session = sign_in(client, conn, viewer)
        first = _row(session.get("/fragments/workers").text, stale)
        second = _row(session.get("/workers").text, stale)
    assert 'data-liveness="stale"' in first and 'class="liveness-stale dead"' in first
    assert '<span class="badge bad">stale</span>' in first
    frozen = exact_uptime(conn, stale, "last_heartbeat_at")
    assert frozen == 3600 - 12
    assert _uptime(first) == _uptime(second) == f"{int(frozen)} 59 min 48 s"


def test_a_dead_worker_is_red_and_shows_its_job_going_back_to_the_queue(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    viewer = add_user(conn, tenant, Role.VIEWER)
    dead, job = dead_worker_with_reaped_job(conn, tenant)
    with web_client(db_url) as client:
        session = sign_in(client, conn, viewer)
        row = _row(session.get("/workers").text, dead)
        detail = session.get(f"/workers/{dead}").text
        fragment = session.get(f"/fragments/workers/{dead}").text
        live_only = session.get("/workers?show=live").text
    assert 'data-liveness="dead"' in row and "dead" in row.split('class="')[1].split('"')[0]
    assert '<span class="badge bad">dead</span>' in row
    assert _uptime(row) == "120 2 min 0 s"
    assert f'id="worker-{dead}"' not in live_only and "No live workers." in live_only
    for html in (detail, fragment):
        assert 'data-liveness="dead"' in html
        assert "Jobs returned to the queue (attempt refunded)" in html
        returned = html.split("Jobs returned to the queue")[1]
        assert f'<a href="/jobs/{job}">{job}</a>' in returned
        assert "reaped" in returned and "(refunded)" in returned and "queued" in returned
    assert one(conn, "SELECT attempt FROM codity.jobs WHERE id = %s", [job]) == 0


def test_the_workers_list_pages_by_cursor_and_keeps_the_filter(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    viewer = add_user(conn, tenant, Role.VIEWER)
    workers = [register(conn, tenant, f"w{n}") for n in range(102)]
    with web_client(db_url) as client:
        session = sign_in(client, conn, viewer)
        first = session.get("/workers?show=live").text
        found = re.search(r'href="/workers\?(show=live&amp;cursor=[^"]+)">Older workers', first)
        assert found, first
        query = found.group(1).replace("&amp;", "&")
        second = session.get(f"/workers?{query}").text
        refreshed = session.get(f"/fragments/workers?{query}").text
        bad = session.get("/workers?cursor=not-a-cursor")
    assert f'id="worker-{workers[-1]}"' in first and f'id="worker-{workers[1]}"' not in first
    assert [int(w) for w in re.findall(r'<tr id="worker-(\d+)"', second)] == workers[1::-1]
    assert re.findall(r'<tr id="worker-(\d+)"', refreshed) == re.findall(
        r'<tr id="worker-(\d+)"', second
    )
    assert f'hx-get="/fragments/workers?{found.group(1)}"' in second
    assert 'href="/workers?show=live">Newest workers' in second
    assert bad.status_code == 422 and "cursor" in bad.text


def test_another_projects_worker_page_reads_exactly_like_a_missing_one(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    owner = add_user(conn, tenant, Role.OWNER)
    other = make_tenant(conn)
    queue(conn, other)
    foreign = register(conn, other, "foreign-worker")

    def without_request_id(html: str) -> str:
        return re.sub(r"request [0-9a-zA-Z-]+", "request …", html)

    with web_client(db_url) as client:
        session = sign_in(client, conn, owner)
        answers: dict[str, Any] = {
            path: session.get(path)
            for path in (
                f"/workers/{foreign}",
                "/workers/8999999999",
                f"/fragments/workers/{foreign}",
                "/fragments/workers/8999999999",
            )
        }
    for answer in answers.values():
        assert answer.status_code == 404
        assert "foreign-worker" not in answer.text
    pages = [without_request_id(a.text) for a in answers.values()]
    assert pages[0] == pages[1] and pages[2] == pages[3]


def test_a_dead_workers_held_jobs_are_said_to_go_back_at_the_next_reap(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    viewer = add_user(conn, tenant, Role.VIEWER)
    worker = register(conn, tenant, "silent")
    enqueue(conn, tenant)
    job, _ = hold(conn, worker)
    with web_client(db_url) as client:
        session = sign_in(client, conn, viewer)
        alive = session.get(f"/fragments/workers/{worker}").text
        conn.execute(
            "UPDATE codity.workers SET last_heartbeat_at = now() - interval '1 hour' WHERE id = %s",
            [worker],
        )
        dead = session.get(f"/fragments/workers/{worker}").text
    assert 'id="held-note"' not in alive, "a live worker's jobs are not going anywhere"
    assert 'data-liveness="dead"' in dead
    held = dead.split('<h2 id="held-h">', 1)[1].split("</section>", 1)[0]
    assert "This worker is dead: the scheduler's next reap puts this job back in the queue" in held
    assert f'<a href="/jobs/{job}">{job}</a>' in held
