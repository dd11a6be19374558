"""A real Codity, a real browser: what the dashboard's browser tests drive.

:class:`LiveSystem` is the system ``codity up --demo`` runs, on a database of the tests'
own: the demo data set, ``codity web`` on a free port, ``codity scheduler`` and a
``codity worker`` for the demo queues, each a real process (tests/processes.py). Workers
are declared dead after ``DEAD_AFTER_S`` so a SIGKILLed one turns red quickly.

:func:`launch_chromium` starts Debian's Chromium through Playwright (no browser download).
A missing Chromium fails the run with what to install; it never skips.

:class:`Watched` is a page whose console errors, failed scripts and Content-Security-Policy
violations are collected, so a test can assert there were none. ``screenshot`` saves the
page into docs/screenshots/ for the README and docs.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2 as httpx
import psycopg
from playwright.sync_api import Browser, BrowserContext, ConsoleMessage, Page, sync_playwright

from codity.demo import DEMO_OPERATOR_EMAIL, DEMO_OPERATOR_PASSWORD, seed_demo
from tests.ports import free_port
from tests.processes import REPO_ROOT, CodityProcess, Processes, wait_until

__all__ = [
    "DEAD_AFTER_S",
    "SCREENSHOTS",
    "LiveSystem",
    "Watched",
    "chromium_path",
    "launch_chromium",
    "live_system",
]

DEAD_AFTER_S = 3
SCREENSHOTS = REPO_ROOT / "docs" / "screenshots"
DEMO_APP = "codity.worker.demo:registry"
DEMO_QUEUES = ("emails", "reports", "webhooks")

# Records every CSP violation in the page itself: the event carries the directive and the
# blocked resource, which a console message only paraphrases.
_CSP_LISTENER = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", function (e) {
  window.__cspViolations.push(e.violatedDirective + " " + e.blockedURI);
});
"""


def chromium_path() -> str:
    found = os.environ.get("CODITY_CHROMIUM") or shutil.which("chromium")
    if not found:
        raise AssertionError(
            "the browser tests drive Debian's Chromium: apt-get install chromium "
            "(or set CODITY_CHROMIUM to a Chromium binary)"
        )
    return found


@contextmanager
def launch_chromium() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium_path(),
            args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
        )
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class LiveSystem:
    url: str
    """The web app, e.g. http://127.0.0.1:43123."""
    db_url: str
    processes: Processes
    web: CodityProcess
    scheduler: CodityProcess
    worker: CodityProcess

    def api_token(
        self, email: str = DEMO_OPERATOR_EMAIL, password: str = DEMO_OPERATOR_PASSWORD
    ) -> str:
        answer = httpx.post(
            f"{self.url}/api/v1/auth/login", json={"email": email, "password": password}
        )
        assert answer.status_code == 200, answer.text
        return str(answer.json()["data"]["access_token"])

    def api(self, method: str, path: str, token: str, **kwargs: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}", **kwargs.pop("headers", {})}
        return httpx.request(method, f"{self.url}{path}", headers=headers, timeout=10, **kwargs)

    def start_worker(self, queue: str, *, name: str) -> CodityProcess:
        process = self.processes.start(
            name, ["worker", "--app", DEMO_APP, "--queue", queue, "--concurrency", "2"]
        )
        return process


@contextmanager
def live_system(db_url: str, log_dir: Path) -> Iterator[LiveSystem]:
    """The demo system on ``db_url`` (migrated, the caller's) until the block ends."""
    seed_demo(db_url)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("SELECT codity.configure(make_interval(secs => %s))", [DEAD_AFTER_S])
    port = free_port()
    with Processes(
        log_dir,
        db_url,
        JWT_SECRET="browser-tests-" + "x" * 40,
        CODITY_DEMO_FAILURE_RATE="0",
        WORKER_HEARTBEAT_MS="500",
    ) as processes:
        web = processes.start("web", ["web", "--host", "127.0.0.1", "--port", str(port)])
        scheduler = processes.scheduler(tick_ms=250)
        queue_args = [arg for q in DEMO_QUEUES for arg in ("--queue", q)]
        worker = processes.start(
            "worker", ["worker", "--app", DEMO_APP, *queue_args, "--concurrency", "4"]
        )
        url = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            try:
                return httpx.get(f"{url}/readyz", timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        wait_until(ready, timeout=60, what="the web app answering /readyz", alive=[web])
        yield LiveSystem(url, db_url, processes, web, scheduler, worker)


@dataclass
class Watched:
    """A page whose console errors, uncaught errors and CSP violations are recorded."""

    page: Page
    base_url: str
    problems: list[str] = field(default_factory=list)

    @classmethod
    def open(cls, context: BrowserContext, base_url: str) -> Watched:
        context.add_init_script(_CSP_LISTENER)
        watched = cls(context.new_page(), base_url)
        watched.page.on("console", watched._console)
        watched.page.on("pageerror", lambda error: watched.problems.append(f"error: {error}"))
        return watched

    def _console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.problems.append(f"console: {message.text}")

    def goto(self, path: str) -> None:
        self.page.goto(f"{self.base_url}{path}")

    def csp_violations(self) -> list[str]:
        found = self.page.evaluate("window.__cspViolations || []")
        return [str(v) for v in found]

    def assert_clean(self) -> None:
        """No console error, no uncaught error, no CSP violation on the current page."""
        assert self.csp_violations() == []
        assert self.problems == []

    def sign_in(
        self, email: str = DEMO_OPERATOR_EMAIL, password: str = DEMO_OPERATOR_PASSWORD
    ) -> None:
        self.goto("/signin")
        self.page.get_by_label("Email").fill(email)
        self.page.get_by_label("Password").fill(password)
        self.page.get_by_role("button", name="Sign in").click()
        self.page.wait_for_url(f"{self.base_url}/")

    def screenshot(self, name: str) -> None:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
