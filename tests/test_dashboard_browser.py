"""The dashboard in a real browser (Chromium through Playwright) against a real system:
``codity web``, ``codity scheduler`` and ``codity worker`` processes on the demo data set.

Each test opens its own browser context (its own cookies), signs in through the sign-in
page and asserts what an operator sees, with no reload where the issue says "live". Every
page visited must run under the strict CSP without a violation or a console error. The
screens are saved into docs/screenshots/ as they are visited.

Marked ``browser``: left out of the default run (it needs Chromium, which ``.ci/run``
installs); run with ``./test -m browser``.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from typing import Any

import httpx2 as httpx
import psycopg
import pytest
from playwright.sync_api import Browser, expect

from codity.web.dashboard.session import SESSION_COOKIE
from tests.browser import DEAD_AFTER_S, LiveSystem, Watched, launch_chromium, live_system
from tests.conftest import cloned
from tests.processes import wait_until

pytestmark = pytest.mark.browser


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


@pytest.fixture
def operator(browser: Browser, system: LiveSystem) -> Iterator[Watched]:
    """The demo operator (owner), signed in through the sign-in page."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    watched = Watched.open(context, system.url)
    watched.sign_in()
    try:
        yield watched
    finally:
        context.close()


def test_the_demo_operator_signs_in_and_sees_the_three_demo_queues(operator: Watched) -> None:
    page = operator.page
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    for queue in ("emails", "reports", "webhooks"):
        expect(page.get_by_role("link", name=queue, exact=True).first).to_be_visible()
    operator.assert_clean()
    operator.screenshot("overview")


def test_a_post_without_the_csrf_token_is_refused(operator: Watched, system: LiveSystem) -> None:
    """The browser's own cookie, this site's Origin, but no token: refused, still signed in."""
    answer = operator.page.request.post(
        f"{system.url}/signout", headers={"Origin": system.url}, form={"nothing": "here"}
    )
    assert answer.status == 403
    operator.goto("/")
    expect(operator.page.get_by_role("heading", name="Overview")).to_be_visible()


def test_signing_out_ends_the_session(operator: Watched, system: LiveSystem) -> None:
    cookie = next(c for c in operator.page.context.cookies() if c["name"] == SESSION_COOKIE)
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    operator.page.get_by_role("button", name="Sign out").click()
    operator.page.wait_for_url(f"{system.url}/signin")
    operator.goto("/")
    operator.page.wait_for_url(f"{system.url}/signin?next=%2F")
    replayed = httpx.get(
        f"{system.url}/", cookies={SESSION_COOKIE: cookie["value"]}, follow_redirects=False
    )
    assert replayed.status_code == 303, "the old cookie is revoked, not just forgotten"
    operator.assert_clean()


def one_or_none(conn: psycopg.Connection[Any], query: str, params: Any) -> Any:
    found = conn.execute(query, params).fetchone()
    return None if found is None else found[0]


def test_a_sigkilled_worker_turns_red_without_a_reload(
    operator: Watched, system: LiveSystem
) -> None:
    doomed = system.start_worker("reports", name="doomed")
    with psycopg.connect(system.db_url, autocommit=True) as conn:
        worker_id = wait_until(
            lambda: one_or_none(conn, "SELECT id FROM codity.workers WHERE pid = %s", [doomed.pid]),
            timeout=30,
            what="the worker registering",
            alive=[doomed],
        )
    page = operator.page
    operator.goto("/workers")
    row = page.locator(f"#worker-{worker_id}")
    expect(row).to_have_attribute("data-liveness", "alive", timeout=30_000)
    doomed.send(signal.SIGKILL)
    killed = time.monotonic()
    expect(row).not_to_have_attribute("data-liveness", "alive", timeout=(DEAD_AFTER_S + 2) * 1000)
    assert time.monotonic() - killed <= DEAD_AFTER_S + 2 + 0.5
    uptime = row.locator("td.uptime").inner_text()
    time.sleep(2.5)
    assert row.locator("td.uptime").inner_text() == uptime, "a dead worker's uptime stops"
    operator.assert_clean()
    operator.screenshot("workers")
