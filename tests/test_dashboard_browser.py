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

import re
import signal
import time
from collections.abc import Iterator
from typing import Any

import httpx2 as httpx
import psycopg
import pytest
from playwright.sync_api import Browser, expect
from psycopg.types.json import Jsonb

from codity.web.dashboard.session import SESSION_COOKIE
from codity.web.passwords import hash_password
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
    # A live fragment in flight during the sign-out may send the page there first, with the
    # page (never the fragment) to come back to: either way, the sign-in page.
    operator.page.wait_for_url(re.compile(re.escape(system.url) + r"/signin(\?next=%2F)?$"))
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


def test_a_sigkilled_worker_turns_red_and_its_job_returns_refunded(
    operator: Watched, system: LiveSystem
) -> None:
    """A worker on a queue of its own holds a 60 s job when it is SIGKILLed: its row turns
    red within the dead-worker threshold + 2 s without a reload, its uptime stops, and its
    page shows the job back in the queue with the attempt refunded."""
    with psycopg.connect(system.db_url, autocommit=True) as conn:
        conn.execute("SELECT * FROM codity.create_queue('doomed')")
        job_id = one_or_none(
            conn,
            "SELECT job_id FROM codity.enqueue('doomed', 'reports.generate', %s)",
            [Jsonb({"duration_s": 60})],
        )
        doomed = system.start_worker("doomed", name="doomed")
        worker_id = wait_until(
            lambda: one_or_none(
                conn,
                "SELECT worker_id FROM codity.jobs WHERE id = %s AND status = 'running'",
                [job_id],
            ),
            timeout=30,
            what="the doomed worker running its job",
            alive=[doomed],
        )
    page = operator.page
    operator.goto("/workers")
    row = page.locator(f"#worker-{worker_id}")
    expect(row).to_have_attribute("data-liveness", "alive", timeout=10_000)
    time.sleep(2)  # a few heartbeats, so the uptime that freezes is not zero
    doomed.send(signal.SIGKILL)
    killed = time.monotonic()
    expect(row).to_have_attribute("data-liveness", "dead", timeout=(DEAD_AFTER_S + 2) * 1000)
    assert time.monotonic() - killed <= DEAD_AFTER_S + 2 + 0.5
    uptime = row.locator("td.uptime").inner_text()
    assert uptime.endswith(" s") and float(uptime.split()[0]) >= 1, uptime
    time.sleep(2.5)
    assert row.locator("td.uptime").inner_text() == uptime, "a dead worker's uptime stops"
    operator.assert_clean()
    operator.screenshot("workers")

    operator.goto(f"/workers/{worker_id}")
    returned = page.locator("section[aria-labelledby=returned-h] tbody tr", has_text=str(job_id))
    expect(returned).to_contain_text("(refunded)", timeout=10_000)
    expect(returned).to_contain_text("queued")
    with psycopg.connect(system.db_url) as conn:
        status, attempt = conn.execute(
            "SELECT status::text, attempt FROM codity.jobs WHERE id = %s", [job_id]
        ).fetchone() or ("", -1)
    assert (status, attempt) == ("queued", 0), "back in the queue, the attempt refunded"
    operator.assert_clean()
    operator.screenshot("worker")


def test_an_idle_worker_killed_turns_red_on_the_tick_alone(
    operator: Watched, system: LiveSystem
) -> None:
    """A worker holding nothing dies without any NOTIFY at all (no job is reaped): only the
    2-second tick can show it. Break it: drop codity:tick from workers.html and this fails."""
    with psycopg.connect(system.db_url, autocommit=True) as conn:
        conn.execute("SELECT * FROM codity.create_queue('quiet')")
        idle = system.start_worker("quiet", name="idle")
        worker_id = wait_until(
            lambda: one_or_none(conn, "SELECT id FROM codity.workers WHERE pid = %s", [idle.pid]),
            timeout=30,
            what="the idle worker registering",
            alive=[idle],
        )
    operator.goto("/workers")
    row = operator.page.locator(f"#worker-{worker_id}")
    expect(row).to_have_attribute("data-liveness", "alive", timeout=10_000)
    idle.send(signal.SIGKILL)
    expect(row).to_have_attribute("data-liveness", "dead", timeout=(DEAD_AFTER_S + 2) * 1000)
    operator.assert_clean()


@pytest.fixture
def viewer(browser: Browser, system: LiveSystem) -> Iterator[Watched]:
    """A viewer of the demo org, signed in through the sign-in page."""
    email = f"viewer-{time.monotonic_ns()}@codity.test"
    with psycopg.connect(system.db_url, autocommit=True) as conn:
        conn.execute(
            "WITH u AS (INSERT INTO codity.users (email, password_hash) VALUES (%s, %s)"
            " RETURNING id)"
            " INSERT INTO codity.memberships (org_id, user_id, role)"
            " SELECT p.org_id, u.id, 'viewer' FROM codity.projects p, u WHERE p.is_default",
            [email, hash_password(VIEWER_PASSWORD)],
        )
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    watched = Watched.open(context, system.url)
    watched.sign_in(email, VIEWER_PASSWORD)
    try:
        yield watched
    finally:
        context.close()


VIEWER_PASSWORD = "viewer-password-for-the-browser"
# Screens with actions for members or admins, and what a viewer must not be offered there.
_VIEWER_SCREENS = ("/", "/queues/emails", "/jobs", "/dead-letters", "/schedules", "/settings")


def test_a_viewer_sees_no_action_control_and_a_forged_post_is_refused(
    viewer: Watched, system: LiveSystem
) -> None:
    page = viewer.page
    for path in _VIEWER_SCREENS:
        viewer.goto(path)
        expect(page.locator("main")).to_be_visible()
        actions = page.locator("main form[method=post] button, main form[method=POST] button")
        assert actions.count() == 0, f"{path} offers a viewer {actions.all_inner_texts()}"
        viewer.assert_clean()
    with psycopg.connect(system.db_url) as conn:
        before = one_or_none(conn, "SELECT is_paused FROM codity.queues WHERE name = 'emails'", [])
    csrf = page.locator('meta[name="csrf-token"]').get_attribute("content")
    forged = page.request.post(
        f"{system.url}/queues/emails/pause",
        headers={"Origin": system.url},
        form={"csrf": csrf or ""},
        max_redirects=0,
    )
    assert forged.status == 403
    with psycopg.connect(system.db_url) as conn:
        after = one_or_none(conn, "SELECT is_paused FROM codity.queues WHERE name = 'emails'", [])
    assert (before, after) == (False, False)


def test_a_job_enqueued_through_the_api_appears_without_a_reload(
    operator: Watched, system: LiveSystem
) -> None:
    page = operator.page
    operator.goto("/jobs?queue=emails")
    expect(page.get_by_role("heading", name="Jobs")).to_be_visible()
    answer = system.api(
        "POST",
        "/api/v1/jobs",
        system.api_token(),
        json={"queue": "emails", "task": "emails.send", "payload": {"to": "live@example.com"}},
    )
    assert answer.status_code == 201, answer.text
    job_id = answer.json()["data"]["id"]
    expect(page.locator(f"#job-{job_id}")).to_be_visible(timeout=5_000)
    assert page.url.endswith("/jobs?queue=emails"), "no navigation: the list re-rendered itself"
    expect(page.locator(f"#job-{job_id}")).to_have_attribute("data-status", "completed")
    operator.assert_clean()
    operator.screenshot("jobs")
    page.locator(f"#job-{job_id} a").first.click()
    expect(page.locator("#job-facts")).to_have_attribute("data-status", "completed")
    expect(page.locator("#job-payload")).to_contain_text("live@example.com")
    operator.assert_clean()
    operator.screenshot("job")


def _enqueue(system: LiveSystem, to: str) -> int:
    answer = system.api(
        "POST",
        "/api/v1/jobs",
        system.api_token(),
        json={"queue": "emails", "task": "emails.send", "payload": {"to": to}},
    )
    assert answer.status_code == 201, answer.text
    return int(answer.json()["data"]["id"])


def test_a_broken_stream_falls_back_to_polling_and_comes_back(
    operator: Watched, system: LiveSystem
) -> None:
    """With /events refused the page polls every 2 s (a new job still shows), and once the
    stream answers again the page reconnects to it."""
    page = operator.page
    page.route("**/events", lambda route: route.abort())
    operator.goto("/jobs?queue=emails")
    expect(page.locator("#live-status")).to_have_text("polling every 2 s", timeout=5_000)
    job_id = _enqueue(system, "polled@example.com")
    expect(page.locator(f"#job-{job_id}")).to_be_visible(timeout=5_000)
    page.unroute("**/events")
    expect(page.locator("#live-status")).to_have_text("live", timeout=10_000)


_HIDE = """hidden => {
  Object.defineProperty(document, "hidden", {configurable: true, get: () => hidden});
  document.dispatchEvent(new Event("visibilitychange"));
}"""


def test_a_hidden_tab_stops_updating_and_catches_up_when_shown(
    operator: Watched, system: LiveSystem
) -> None:
    page = operator.page
    operator.goto("/jobs?queue=emails")
    expect(page.locator("#live-status")).to_have_text("live", timeout=10_000)
    fetched: list[str] = []
    page.on("request", lambda request: fetched.append(request.url))
    page.evaluate(_HIDE, True)
    expect(page.locator("#live-status")).to_have_text("paused while hidden")
    job_id = _enqueue(system, "hidden@example.com")
    time.sleep(3)  # a NOTIFY and a tick would both have refreshed a visible page by now
    assert [u for u in fetched if "/fragments/" in u or u.endswith("/events")] == []
    expect(page.locator(f"#job-{job_id}")).to_have_count(0)
    page.evaluate(_HIDE, False)
    expect(page.locator(f"#job-{job_id}")).to_be_visible(timeout=5_000)
    operator.assert_clean()


def test_cancelling_the_selected_rows_asks_first_and_cancels_those_only(
    operator: Watched, system: LiveSystem
) -> None:
    with psycopg.connect(system.db_url, autocommit=True) as conn:
        conn.execute("SELECT * FROM codity.create_queue('picked')")
        ids = [
            one_or_none(conn, "SELECT job_id FROM codity.enqueue('picked', 'emails.send')", [])
            for _ in range(3)
        ]
    page = operator.page
    operator.goto("/jobs?queue=picked")
    for job_id in ids[:2]:
        page.locator(f"#pick-{job_id}").check()
    asked: list[str] = []

    def answer(dialog: Any) -> None:
        asked.append(dialog.message)
        dialog.accept()

    page.once("dialog", answer)
    page.locator("#cancel-selected").click()
    expect(page.locator("#jobs-flash")).to_contain_text("2")
    assert asked and asked[0].startswith("Cancel the selected jobs?")
    with psycopg.connect(system.db_url) as conn:
        statuses = [
            one_or_none(conn, "SELECT status::text FROM codity.jobs WHERE id = %s", [i])
            for i in ids
        ]
    assert statuses == ["cancelled", "cancelled", "queued"]
    operator.assert_clean()


def _dead_letters(conn: psycopg.Connection[Any], queue: str, count: int) -> list[tuple[int, int]]:
    """``count`` jobs of ``queue`` (one attempt allowed) failed once, so dead-lettered, as a
    worker would leave them; returns (job id, dead letter id) pairs."""
    conn.execute("SELECT * FROM codity.create_queue(%s, p_max_attempts => 1)", [queue])
    worker = one_or_none(
        conn, "SELECT codity.register_worker('setup', ARRAY[%s], p_heartbeat_seconds => 1)", [queue]
    )
    made = []
    for i in range(count):
        conn.execute(
            "SELECT * FROM codity.enqueue(%s, 'emails.send', %s)",
            [queue, Jsonb({"to": f"dead-{i}@example.com"})],
        )
        job, fence = conn.execute(
            "SELECT job_id, fence FROM codity.claim(%s, %s, 1)", [worker, queue]
        ).fetchone() or (0, 0)
        conn.execute("SELECT * FROM codity.start(%s, %s)", [job, fence])
        conn.execute("SELECT * FROM codity.fail(%s, %s, 'SMTP 554: rejected')", [job, fence])
        letter = one_or_none(conn, "SELECT id FROM codity.dead_letters WHERE job_id = %s", [job])
        made.append((job, letter))
    conn.execute("SELECT codity.deregister_worker(%s)", [worker])
    return made


def test_replaying_a_dead_letter_from_the_ui_ends_with_the_job_completed(
    operator: Watched, system: LiveSystem
) -> None:
    with psycopg.connect(system.db_url, autocommit=True) as conn:
        ((job, letter),) = _dead_letters(conn, "replays", 1)
    system.start_worker("replays", name="replays")
    page = operator.page
    operator.goto("/dead-letters?queue=replays")
    row = page.locator(f"#dead-letter-{letter}")
    expect(row).to_have_attribute("data-replayed", "false")
    operator.screenshot("dead-letters")
    page.once("dialog", lambda dialog: dialog.accept())
    row.get_by_role("button", name=f"Replay dead letter {letter}").click()
    with psycopg.connect(system.db_url, autocommit=True) as conn:
        wait_until(
            lambda: (
                one_or_none(conn, "SELECT status::text FROM codity.jobs WHERE id = %s", [job])
                == "completed"
            ),
            timeout=30,
            what="the replayed job completing",
        )
        replayed = one_or_none(
            conn, "SELECT replayed_job_id FROM codity.dead_letters WHERE id = %s", [letter]
        )
    assert replayed == job
    operator.goto(f"/dead-letters/{letter}")
    expect(page.locator(f"#dead-letter-{letter}")).to_have_attribute("data-replayed", "true")
    operator.assert_clean()
    operator.screenshot("dead-letter")


def test_retry_all_matching_states_its_count_and_does_exactly_that_many(
    operator: Watched, system: LiveSystem
) -> None:
    with psycopg.connect(system.db_url, autocommit=True) as conn:
        made = _dead_letters(conn, "bulk", 4)
    page = operator.page
    operator.goto("/jobs?queue=bulk&state=dead_letter")
    retry_all = page.locator("#retry-all")
    expect(retry_all).to_contain_text("4")
    retry_all.click()
    scope = page.locator("#bulk-scope")
    expect(scope).to_have_attribute("data-count", "4")
    expect(scope).to_contain_text("Retry 4")
    operator.assert_clean()
    operator.screenshot("jobs-confirm")
    with psycopg.connect(system.db_url, autocommit=True) as conn:
        # Dead-lettered after the confirmation was shown: outside what it stated.
        ((late, _),) = _dead_letters_more(conn, "bulk")
    page.locator("#bulk-confirm button[type=submit]").click()
    expect(page.locator("#jobs-flash")).to_contain_text("4")
    with psycopg.connect(system.db_url) as conn:
        statuses: dict[int, str] = dict(
            conn.execute(
                "SELECT j.id, j.status::text FROM codity.jobs j"
                " JOIN codity.queues q ON q.id = j.queue_id WHERE q.name = 'bulk'"
            ).fetchall()
        )
    assert {statuses[job] for job, _ in made} == {"queued"}
    assert statuses[late] == "dead_letter", "a job dead-lettered after the count is left alone"
    operator.assert_clean()


def _dead_letters_more(conn: psycopg.Connection[Any], queue: str) -> list[tuple[int, int]]:
    """One more dead letter in an existing queue (see ``_dead_letters``)."""
    worker = one_or_none(
        conn, "SELECT codity.register_worker('late', ARRAY[%s], p_heartbeat_seconds => 1)", [queue]
    )
    conn.execute("SELECT * FROM codity.enqueue(%s, 'emails.send', '{}')", [queue])
    job, fence = conn.execute(
        "SELECT job_id, fence FROM codity.claim(%s, %s, 1)", [worker, queue]
    ).fetchone() or (0, 0)
    conn.execute("SELECT * FROM codity.start(%s, %s)", [job, fence])
    conn.execute("SELECT * FROM codity.fail(%s, %s, 'late')", [job, fence])
    conn.execute("SELECT codity.deregister_worker(%s)", [worker])
    letter = one_or_none(conn, "SELECT id FROM codity.dead_letters WHERE job_id = %s", [job])
    return [(job, letter)]


# Every screen, saved for the docs (the ones the tests above visit are saved there).
_SCREENS = {
    "queues": "/queues",
    "queue": "/queues/emails",
    "schedules": "/schedules",
    "schedule": "/schedules/reports-every-minute",
    "settings": "/settings",
}


_UNLABELLED = """
() => Array.from(document.querySelectorAll(
    'input:not([type=hidden]), select, textarea, button')).filter(el => {
  const named = (el.getAttribute('aria-label') || '').trim()
    || (el.labels && Array.from(el.labels).some(l => l.textContent.trim()))
    || (el.tagName === 'BUTTON' && el.textContent.trim());
  return !named;
}).map(el => el.outerHTML.slice(0, 120))
"""


def test_every_screen_renders_under_the_csp_without_an_error(operator: Watched) -> None:
    """Every screen loads clean, every control has a name a screen reader can say, and the
    first Tab lands on the skip link."""
    for name, path in _SCREENS.items():
        operator.goto(path)
        expect(operator.page.locator("main h1")).to_be_visible()
        assert operator.page.evaluate(_UNLABELLED) == [], f"unlabelled controls on {path}"
        operator.assert_clean()
        operator.screenshot(name)
    for path in ("/jobs", "/dead-letters", "/workers", "/"):
        operator.goto(path)
        assert operator.page.evaluate(_UNLABELLED) == [], f"unlabelled controls on {path}"
    operator.page.keyboard.press("Tab")
    focused = operator.page.evaluate("document.activeElement.textContent.trim()")
    assert focused == "Skip to content"


def test_dark_mode_follows_the_system(browser: Browser, system: LiveSystem) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 900}, color_scheme="dark")
    try:
        watched = Watched.open(context, system.url)
        watched.sign_in()
        background = watched.page.evaluate("getComputedStyle(document.body).backgroundColor")
        channels = [int(c) for c in background[background.index("(") + 1 : -1].split(",")[:3]]
        assert max(channels) < 80, f"a dark background, got {background}"
        watched.assert_clean()
        watched.screenshot("overview-dark")
    finally:
        context.close()
