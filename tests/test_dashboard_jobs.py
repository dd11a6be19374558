"""The jobs screen without a browser: the search grammar, every page and fragment for every
role, filters and tabs in the URL, keyset pages, a job enqueued through the API showing up
in the live fragment, bulk actions on selected rows and on all matching (confirmed with
its exact count), one job's whole history, and another project's job answered like a
missing one.

Jobs are made through the SQL API (enqueue_many, claim, start, fail, release) as workers
make them; the pages are then driven as an operator would, through a signed-in session.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl

import psycopg
import pytest

from codity.web.access import Role
from codity.web.dashboard.search import JobSearch, SearchError, parse_search
from tests.dashboard import sign_in
from tests.test_web_jobs import claim_and_start, create_queue, dead_letter, register_worker
from tests.test_web_jobs_bulk import enqueue_many, statuses
from tests.webapp import Tenant, add_user, make_tenant, web_client

# ---------------------------------------------------------------------------------------
# The search grammar
# ---------------------------------------------------------------------------------------


def test_every_key_of_the_grammar_parses_and_round_trips() -> None:
    text = (
        'queue:emails task:"send mail" state:dead_letter id:42 worker:7 '
        'payload.customer.id:42 payload.customer.vip:true payload.code:"42" '
        "after:2026-12-01T00:00Z before:2026-12-02"
    )
    found = parse_search(text)
    assert found == JobSearch(
        queue="emails",
        task="send mail",
        state="dead_letter",
        id=42,
        worker=7,
        payload={"customer": {"id": 42, "vip": True}, "code": "42"},
        after="2026-12-01T00:00:00Z",
        before="2026-12-02T00:00:00Z",
    )
    assert parse_search(found.text(with_state=True)) == found, "the box gives the same back"
    assert found.api_filter() == {
        "queue": "emails",
        "task": "send mail",
        "id": 42,
        "worker_id": 7,
        "payload": {"customer": {"id": 42, "vip": True}, "code": "42"},
        "created_after": "2026-12-01T00:00:00Z",
        "created_before": "2026-12-02T00:00:00Z",
        "status": ["dead_letter"],
    }
    assert JobSearch.from_query({}) == JobSearch() and JobSearch().empty


def test_the_url_form_and_the_search_form_agree() -> None:
    search = parse_search('queue:emails payload.a.b:"x y" after:2026-12-01T10:00+02:00')
    assert search.after == "2026-12-01T08:00:00Z", "a zone is honoured, and shown as UTC"
    assert JobSearch.from_query(dict(parse_qsl(search.url()))) == search
    assert JobSearch.from_query({"q": "task:send", "state": "queued"}).state == "queued", (
        "searching keeps the tab unless the search names a state"
    )
    assert JobSearch.from_query({"q": "state:running", "state": "queued"}).state == "running"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("colour:red", '"colour" is not a filter'),
        ("emails", '"emails" is not a filter; write key:value'),
        ("id:abc", "id: must be a whole number"),
        ("worker:0", "worker: must be a whole number"),
        ("state:sleeping", "state: 'sleeping' is not a state"),
        ("after:yesterday", "after: 'yesterday' is not a time"),
        ("queue:a queue:b", "queue: given twice"),
        ('task:"unclosed', "task: a quote is not closed"),
        ("queue:", "queue: give a value after the colon"),
        ("payload:42", "payload: name a key"),
        ("payload..id:1", "a payload path names keys between dots"),
        ("payload.a:1 payload.a.b:2", "conflicts with another payload filter"),
        ("task:" + "x" * 201, "task: at most 200 characters"),
    ],
)
def test_a_search_that_is_not_one_says_why(text: str, message: str) -> None:
    with pytest.raises(SearchError) as caught:
        parse_search(text)
    assert message in str(caught.value)


# ---------------------------------------------------------------------------------------
# Pages
# ---------------------------------------------------------------------------------------


@pytest.fixture
def tenant(conn: psycopg.Connection) -> Tenant:
    made = make_tenant(conn)
    create_queue(conn, made, "emails", max_attempts=1)
    create_queue(conn, made, "reports")
    return made


def rows(html: str) -> dict[int, str]:
    """The list's rows: job id -> data-status."""
    return {int(i): s for i, s in re.findall(r'<tr id="job-(\d+)" data-status="([a-z_]+)"', html)}


def tab_counts(html: str) -> dict[str, str]:
    found = re.findall(r'id="tab-([a-z_]+)" data-count="(\d+)" data-capped="(true|false)"', html)
    return {state: count + ("+" if capped == "true" else "") for state, count, capped in found}


@pytest.mark.parametrize("role", list(Role), ids=lambda r: r.label)
def test_every_role_reads_the_pages_and_only_sees_the_controls_its_role_allows(
    db_url: str, conn: psycopg.Connection, tenant: Tenant, role: Role
) -> None:
    user = add_user(conn, tenant, role)
    dead, _ = dead_letter(conn, tenant)
    queued = enqueue_many(conn, tenant, 2)
    with web_client(db_url) as client:
        session = sign_in(client, conn, user)
        pages = {
            p: session.get(p)
            for p in ("/jobs", "/fragments/jobs", f"/jobs/{dead}", f"/fragments/jobs/{dead}")
        }
    for path, page in pages.items():
        assert page.status_code == 200, (path, page.text)
        assert "style=" not in page.text and "<script>" not in page.text
    listing = pages["/jobs"].text
    assert rows(listing) == {dead: "dead_letter", queued[0]: "queued", queued[1]: "queued"}
    assert f'href="/jobs/{dead}"' in listing
    assert 'hx-trigger="codity:changed from:body"' in listing
    member, admin = role >= Role.MEMBER, role >= Role.ADMIN
    assert ('name="pick-' in listing) is member
    assert ('id="bulk-selected"' in listing) is member
    assert ('id="retry-all"' in listing) is admin
    assert ('id="cancel-all"' in listing) is admin
    detail = pages[f"/jobs/{dead}"].text
    assert ('action="/jobs/' in detail and 'id="job-retry"' in detail) is member
    assert 'id="job-cancel"' not in detail, "a dead-lettered job cannot be cancelled"


def test_tabs_count_each_state_and_every_filter_key_narrows_the_list(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    owner = add_user(conn, tenant, Role.OWNER)
    dead, _ = dead_letter(conn, tenant, task="send")
    worker = register_worker(conn, tenant, "w-run", "reports")
    enqueue_many(conn, tenant, 1, queue="reports", task="build")
    running, _ = claim_and_start(conn, tenant, worker, "reports")
    gold = enqueue_many(conn, tenant, 2, task="send", payload={"customer": {"id": 42}})
    plain = enqueue_many(conn, tenant, 3, task="other", payload={"customer": {"id": 7}})
    conn.execute(
        "UPDATE codity.jobs SET created_at = '2026-01-01T00:00Z' WHERE id = ANY(%s)", [plain]
    )
    with web_client(db_url) as client:
        session = sign_in(client, conn, owner)

        def listed(query: str) -> dict[int, str]:
            page = session.get(f"/jobs?{query}")
            assert page.status_code == 200, page.text
            assert "search-problem" not in page.text, page.text
            return rows(page.text)

        everything = session.get("/jobs").text
        assert tab_counts(everything) == {
            "all": "7",
            "waiting": "0",
            "scheduled": "0",
            "queued": "5",
            "running": "1",
            "completed": "0",
            "dead_letter": "1",
            "cancelled": "0",
        }
        assert set(listed("queue=reports")) == {running}
        assert set(listed("task=send")) == {dead, *gold}
        assert set(listed(f"id={dead}")) == {dead}
        assert set(listed(f"worker={worker}")) == {running}
        assert set(listed(f"worker_id={worker}")) == {running}, "as the workers screen links"
        assert set(listed("state=running")) == {running}
        assert set(listed('payload={"customer":{"id":42}}')) == set(gold)
        assert set(listed("q=payload.customer.id:42")) == set(gold)
        assert set(listed("q=payload.customer.id:%2242%22")) == set(), "a quoted 42 is a string"
        assert set(listed("before=2026-06-01")) == set(plain)
        assert set(listed("after=2026-06-01")) == {dead, running, *gold}
        assert set(listed("q=state:dead_letter+task:send")) == {dead}
        narrowed = session.get("/jobs?task=send").text
        assert tab_counts(narrowed)["all"] == "3", "the tabs count within the filters"
        assert 'href="/jobs?state=queued&amp;task=send"' in narrowed, "tabs keep the filters"
        assert 'value="task:send"' in narrowed, "the search box shows the filters"


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("q=colour:red", "is not a filter"),
        ("q=after:yesterday", "is not a time"),
        ("id=abc", "id: must be a whole number"),
        ("payload=[1]", "payload: must be a JSON object"),
        ("payload={", "payload: not JSON"),
        ("state=sleeping", "is not a state"),
        ("cursor=not-a-cursor", "cursor is not valid"),
        ("q=task:" + "x" * 300, "at most 200 characters"),
    ],
)
def test_a_bad_search_is_a_message_on_the_page_not_an_error(
    db_url: str, conn: psycopg.Connection, tenant: Tenant, query: str, message: str
) -> None:
    viewer = add_user(conn, tenant, Role.VIEWER)
    with web_client(db_url) as client:
        session = sign_in(client, conn, viewer)
        page = session.get(f"/jobs?{query}")
        fragment = session.get(f"/fragments/jobs?{query}")
    assert page.status_code == fragment.status_code == 200
    for html in (page.text, fragment.text):
        problem = re.search(r'id="search-problem" role="alert">([^<]*)<', html)
        assert problem, html
        assert message in problem.group(1).replace("&#39;", "'").replace("&#34;", '"')


def test_a_bad_search_stays_in_the_box_and_in_the_live_fragment(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    viewer = add_user(conn, tenant, Role.VIEWER)
    enqueue_many(conn, tenant, 1)
    with web_client(db_url) as client:
        page = sign_in(client, conn, viewer).get("/jobs?q=colour:red").text
    assert 'name="q" type="search" value="colour:red"' in page
    assert 'hx-get="/fragments/jobs?q=colour:red"' in page
    assert rows(page) == {}, "no list under a search that could not be read"


def test_older_pages_follow_the_keyset_and_repeat_nothing(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    viewer = add_user(conn, tenant, Role.VIEWER)
    jobs = enqueue_many(conn, tenant, 120)
    seen: list[int] = []
    with web_client(db_url) as client:
        session = sign_in(client, conn, viewer)
        path: str | None = "/jobs"
        while path:
            page = session.get(path).text
            seen += list(rows(page))
            older = re.search(r'<a href="([^"]+)" id="jobs-older"', page)
            path = older.group(1).replace("&amp;", "&") if older else None
    assert seen == sorted(jobs, reverse=True), "every job once, newest first, in 3 pages"


def test_a_job_enqueued_through_the_api_appears_in_the_live_fragment(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    member = add_user(conn, tenant, Role.MEMBER)
    with web_client(db_url) as client:
        session = sign_in(client, conn, member)
        page = session.get("/jobs?queue=emails").text
        fragment_url = re.search(r'hx-get="(/fragments/jobs\?[^"]*)"', page)
        assert fragment_url and rows(page) == {}
        made = client.post(
            "/api/v1/jobs",
            json={"queue": "emails", "task": "send", "payload": {}},
            headers=member.headers,
        )
        assert made.status_code == 201, made.text
        again = session.get(fragment_url.group(1).replace("&amp;", "&")).text
        script = client.get("/static/jobs.js")
    assert script.status_code == 200 and "pick-all" in script.text
    assert rows(again) == {made.json()["data"]["id"]: "queued"}
    assert 'hx-preserve="true"' in again, "a checked box survives the re-render"
    assert '<script src="/static/jobs.js" defer></script>' in page
    assert 'id="pick-all"' in again


def test_bulk_selected_acts_for_a_member_and_is_refused_for_a_viewer_or_without_csrf(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    member = add_user(conn, tenant, Role.MEMBER)
    viewer = add_user(conn, tenant, Role.VIEWER)
    dead, _ = dead_letter(conn, tenant)
    jobs = enqueue_many(conn, tenant, 3)
    picked = {f"pick-{jobs[0]}": "1", f"pick-{jobs[1]}": "1", f"pick-{dead}": "1"}
    with web_client(db_url) as client:
        as_viewer = sign_in(client, conn, viewer)
        forged = as_viewer.post("/jobs/bulk", {"action": "cancel", "back": "", **picked})
        assert forged.status_code == 403, forged.text
        as_member = sign_in(client, conn, member)
        no_csrf = as_member.forge(
            "/jobs/bulk", {"action": "cancel", **picked}, origin="http://testserver"
        )
        assert no_csrf.status_code == 403
        assert statuses(conn, jobs) == {"queued": 3}, "refused POSTs change nothing"

        done = as_member.post("/jobs/bulk", {"action": "cancel", "back": "queue=emails", **picked})
        assert done.status_code == 303, done.text
        target = done.headers["location"]
        assert target.startswith("/jobs?queue=emails&")
        flash = as_member.get(target).text
    assert "Cancelled 2 jobs. Skipped 1" in flash
    assert statuses(conn, jobs) == {"cancelled": 2, "queued": 1}
    assert statuses(conn, [dead]) == {"dead_letter": 1}


def test_retry_all_matching_states_its_count_and_does_exactly_that_many(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    admin = add_user(conn, tenant, Role.ADMIN)
    member = add_user(conn, tenant, Role.MEMBER)
    dead = [dead_letter(conn, tenant, task="send")[0] for _ in range(3)]
    other, _ = dead_letter(conn, tenant, task="other")
    with web_client(db_url) as client:
        as_member = sign_in(client, conn, member)
        refused = as_member.get("/jobs/bulk/confirm?action=retry&queue=emails&task=send")
        assert refused.status_code == 403, "all matching is for admins"

        session = sign_in(client, conn, admin)
        listing = session.get("/jobs?state=dead_letter&queue=emails&task=send").text
        link = re.search(r'<a class="button" href="([^"]+)" id="retry-all">([^<]*)<', listing)
        assert link, listing
        assert link.group(2) == "Retry all 3 matching…"
        assert 'id="cancel-all"' not in listing, "no unfinished job on the dead letter tab"
        confirm = session.get(link.group(1).replace("&amp;", "&"))
        assert confirm.status_code == 200, confirm.text
        scope = re.search(
            r'id="bulk-scope" data-count="3" data-as-of="([^"]+)">([^<]*)<', confirm.text
        )
        assert scope, confirm.text
        assert scope.group(2) == "Retry 3 failed jobs in queue emails matching task:send."
        assert statuses(conn, dead) == {"dead_letter": 3}, "the confirmation changes nothing"

        later, _ = dead_letter(conn, tenant, task="send")
        fields = dict(
            re.findall(r'<input type="hidden" name="([a-z_]+)" value="([^"]*)"', confirm.text)
        )
        fields = {k: v.replace("&amp;", "&") for k, v in fields.items() if k != "csrf"}
        no_csrf = session.forge("/jobs/bulk/confirm", fields, origin="http://testserver")
        as_member = sign_in(client, conn, member)
        forged = as_member.post("/jobs/bulk/confirm", fields)
        assert (no_csrf.status_code, forged.status_code) == (403, 403)
        assert statuses(conn, dead) == {"dead_letter": 3}, "refused POSTs change nothing"
        done = session.post("/jobs/bulk/confirm", fields)
        assert done.status_code == 303, done.text
        flash = session.get(done.headers["location"]).text
    assert "Retried 3 jobs." in flash
    assert statuses(conn, dead) == {"queued": 3}
    assert statuses(conn, [later, other]) == {"dead_letter": 2}, "not in the confirmed scope"


def test_a_job_shows_its_payload_attempts_timeline_and_dead_letters(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    member = add_user(conn, tenant, Role.MEMBER)
    create_queue(conn, tenant, "retries", max_attempts=3)
    [job] = enqueue_many(conn, tenant, 1, queue="retries", payload={"customer": {"id": 42}})
    worker = register_worker(conn, tenant, "w-detail", "retries")
    _, fence = claim_and_start(conn, tenant, worker, "retries")
    conn.execute("SELECT * FROM codity.release(%s, %s)", [job, fence])
    _, fence = claim_and_start(conn, tenant, worker, "retries")
    conn.execute("SELECT * FROM codity.fail(%s, %s, 'ValueError: boom', false)", [job, fence])
    letter = conn.execute("SELECT id FROM codity.dead_letters WHERE job_id = %s", [job]).fetchone()
    assert letter is not None
    with web_client(db_url) as client:
        session = sign_in(client, conn, member)
        page = session.get(f"/jobs/{job}").text
        retried = session.post(f"/jobs/{job}/retry")
        assert retried.status_code == 303
        after = session.get(retried.headers["location"]).text
    assert '<pre id="job-payload">{\n  &#34;customer&#34;: {\n    &#34;id&#34;: 42' in page
    assert 'data-copy="job-payload"' in page
    executions = re.findall(
        r'<tr id="execution-(\d+)" data-status="([a-z_]+)" data-refunded="(true|false)"', page
    )
    assert executions == [("1", "released", "true"), ("2", "failed", "false")]
    assert f'href="/workers/{worker}"' in page
    assert "attempt refunded" in page and "ValueError: boom" in page
    events = re.findall(r'<li data-event="([a-z_]+)"', page)
    assert events[0] == "created" and events[-1] == "dead_lettered"
    assert f'href="/dead-letters/{letter[0]}"' in page
    assert "Retried 1 job." in after
    assert statuses(conn, [job]) == {"queued": 1}


def test_another_projects_job_is_the_not_found_page_like_a_missing_one(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    owner = add_user(conn, tenant, Role.OWNER)
    other = make_tenant(conn)
    create_queue(conn, other, "emails")
    [foreign] = enqueue_many(conn, other, 1, task="secret-task", payload={"secret": "s3cr3t"})

    def without_request_id(html: str) -> str:
        return re.sub(r"request [0-9a-zA-Z-]+", "request …", html)

    with web_client(db_url) as client:
        session = sign_in(client, conn, owner)
        answers: dict[str, Any] = {
            p: session.get(p)
            for p in (
                f"/jobs/{foreign}",
                "/jobs/8999999999",
                f"/fragments/jobs/{foreign}",
                "/fragments/jobs/8999999999",
            )
        }
        cancel = session.post(f"/jobs/{foreign}/cancel")
        listed = session.get(f"/jobs?id={foreign}").text
        bulk = session.post("/jobs/bulk", {"action": "cancel", f"pick-{foreign}": "1"})
        assert session.get(bulk.headers["location"]).text.count("Skipped 1") == 1
    for answer in [*answers.values(), cancel]:
        assert answer.status_code == 404
        assert "secret" not in answer.text
    pages = [without_request_id(a.text) for a in answers.values()]
    assert pages[0] == pages[1] and pages[2] == pages[3]
    assert rows(listed) == {}
    assert statuses(conn, [foreign]) == {"queued": 1}
