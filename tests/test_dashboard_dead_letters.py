"""The dead letters screen without a browser: the list with its filters, capped count and
pages; replaying one letter and all that match (a confirmation stating scope and count,
then exactly that set); what each role sees and may do; another project's letter answered
like a missing one.

Letters are made as production makes them (tests.test_web_jobs.dead_letter).
"""

from __future__ import annotations

import re
from typing import Any

import psycopg
import pytest

from codity.web.access import Role
from tests.dashboard import sign_in
from tests.test_web_jobs import create_queue, dead_letter
from tests.webapp import Tenant, add_user, make_tenant, web_client


@pytest.fixture
def tenant(conn: psycopg.Connection) -> Tenant:
    made = make_tenant(conn)
    create_queue(conn, made, "emails")
    create_queue(conn, made, "reports")
    return made


def _rows(html: str) -> dict[int, str]:
    """Each listed letter's id and its data-replayed."""
    found = re.findall(r'<tr id="dead-letter-(\d+)" data-replayed="(true|false)"', html)
    return {int(i): replayed for i, replayed in found}


def _replayed_job(conn: psycopg.Connection, letter: int) -> Any:
    row = conn.execute(
        "SELECT replayed_job_id FROM codity.dead_letters WHERE id = %s", [letter]
    ).fetchone()
    assert row is not None
    return row[0]


@pytest.mark.parametrize("role", list(Role), ids=lambda r: r.label)
def test_every_role_reads_the_pages_and_sees_only_the_controls_its_role_allows(
    db_url: str, conn: psycopg.Connection, tenant: Tenant, role: Role
) -> None:
    user = add_user(conn, tenant, role)
    job, letter = dead_letter(conn, tenant)
    with web_client(db_url) as client:
        session = sign_in(client, conn, user)
        listing = session.get("/dead-letters")
        fragment = session.get("/fragments/dead-letters")
        detail = session.get(f"/dead-letters/{letter}")
        detail_fragment = session.get(f"/fragments/dead-letters/{letter}")
    for page in (listing, fragment, detail, detail_fragment):
        assert page.status_code == 200, page.text
        assert 'style="' not in page.text and "<script>" not in page.text
    assert _rows(listing.text) == {letter: "false"}
    assert _rows(fragment.text) == {letter: "false"}
    assert 'hx-get="/fragments/dead-letters?' in listing.text
    assert 'hx-trigger="codity:changed from:body"' in listing.text
    assert (
        f'<section aria-labelledby="dead-letter-facts-h" id="dead-letter-{letter}"' in detail.text
    )
    assert f'href="/jobs/{job}"' in detail.text
    assert "boom" in detail.text and "&#34;n&#34;: 1" in detail.text
    assert 'data-copy="dead-letter-payload"' in detail.text

    replay_form = f'action="/dead-letters/{letter}/replay"'
    assert (replay_form in listing.text) is (role >= Role.MEMBER)
    assert (replay_form in detail.text) is (role >= Role.MEMBER)
    assert ('id="replay-all"' in listing.text) is (role >= Role.ADMIN)
    if role < Role.MEMBER:
        assert 'method="post" action="/dead-letters' not in listing.text + detail.text


def test_filters_live_in_the_url_and_the_count_and_pages_follow_them(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    viewer = add_user(conn, tenant, Role.VIEWER)
    emails = [dead_letter(conn, tenant, "emails", "emails.send")[1] for _ in range(52)]
    report = dead_letter(conn, tenant, "reports", "reports.build")[1]
    with web_client(db_url) as client:
        session = sign_in(client, conn, viewer)
        reports = session.get("/dead-letters?queue=reports")
        assert _rows(reports.text) == {report: "false"}
        assert 'data-count="1"' in reports.text
        assert 'value="reports"' in reports.text, "the filter is shown as it was given"
        assert 'hx-get="/fragments/dead-letters?queue=reports"' in reports.text

        first = session.get("/dead-letters?queue=emails&task=emails.send")
        assert list(_rows(first.text)) == emails[::-1][:50]
        assert 'data-count="52"' in first.text
        older = re.search(r'href="/dead-letters\?([^"]+)" rel="next"', first.text)
        assert older, first.text
        second = session.get("/dead-letters?" + older.group(1).replace("&amp;", "&"))
        assert list(_rows(second.text)) == emails[1::-1]
        assert 'rel="next"' not in second.text

        none = session.get("/dead-letters?task=nothing")
        assert _rows(none.text) == {} and "No dead letters match." in none.text
        bad = session.get("/dead-letters?dead_after=yesterday")
        assert bad.status_code == 422
        assert "dead_after" in bad.text


def test_a_member_replays_one_letter_and_the_job_is_queued_again(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    member = add_user(conn, tenant, Role.MEMBER)
    job, letter = dead_letter(conn, tenant, "emails")
    _, other = dead_letter(conn, tenant, "reports", "reports.build")
    with web_client(db_url) as client:
        session = sign_in(client, conn, member)
        replayed = session.post(f"/dead-letters/{letter}/replay", {"back": "queue=emails"})
        assert replayed.status_code == 303, replayed.text
        target = replayed.headers["location"]
        assert target.startswith("/dead-letters?queue=emails&")
        page = session.get(target)
        assert f"Replayed dead letter {letter} into job {job}." in page.text
        everything = session.get("/dead-letters?replayed=all")
        assert _rows(everything.text) == {letter: "true", other: "false"}
        assert f'<a href="/jobs/{job}">job {job}</a>' in everything.text

        from_detail = session.post(f"/dead-letters/{other}/replay")
        assert from_detail.headers["location"].startswith(f"/dead-letters/{other}?")
        shown = session.get(from_detail.headers["location"])
        assert 'data-replayed="true"' in shown.text
        assert 'id="replay-dead-letter"' not in shown.text, "no second replay offered"
        again = session.post(f"/dead-letters/{other}/replay")
        assert again.status_code == 409
    assert _replayed_job(conn, letter) == job
    status = conn.execute("SELECT status::text FROM codity.jobs WHERE id = %s", [job]).fetchone()
    assert status == ("queued",)


def test_replay_all_states_its_scope_and_count_then_replays_exactly_that(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    admin = add_user(conn, tenant, Role.ADMIN)
    counted = [dead_letter(conn, tenant, "emails", "emails.send")[1] for _ in range(3)]
    other = dead_letter(conn, tenant, "reports", "reports.build")[1]
    with web_client(db_url) as client:
        session = sign_in(client, conn, admin)
        listing = session.get("/dead-letters?queue=emails&task=emails.send")
        assert 'href="/dead-letters/confirm?queue=emails&amp;task=emails.send"' in listing.text
        assert "Replay all 3 matching" in listing.text

        confirm = session.get("/dead-letters/confirm?queue=emails&task=emails.send")
        assert confirm.status_code == 200, confirm.text
        assert "Replay 3 dead letters in queue emails matching task:send" not in confirm.text
        assert "Replay 3 dead letters in queue emails matching task:emails.send" in confirm.text
        assert 'data-count="3" data-as-of="' in confirm.text
        as_of = re.search(r'name="as_of" value="([^"]+)"', confirm.text)
        assert as_of, "the confirmation posts the time its dry run counted at"

        assert 'name="confirmed" value="3"' in confirm.text

        late = dead_letter(conn, tenant, "emails", "emails.send")[1]
        taken = session.post(f"/dead-letters/{counted[0]}/replay")
        assert taken.status_code == 303
        done = session.post(
            "/dead-letters/replay-all",
            {
                "queue": "emails",
                "task": "emails.send",
                "as_of": as_of.group(1),
                "confirmed": "3",
            },
        )
        assert done.status_code == 303, done.text
        page = session.get(done.headers["location"])
        assert "Replayed 2 dead letters. Skipped 1: another replay took them first." in page.text
        assert _rows(page.text) == {late: "false"}, "the letter that died later is left alone"
        unconfirmed = session.post("/dead-letters/replay-all", {"queue": "emails"})
        assert unconfirmed.status_code == 303, "nothing replayed without a confirmed bound"
        assert unconfirmed.headers["location"] == "/dead-letters/confirm?queue=emails"
        nothing = session.get("/dead-letters/confirm?queue=emails&task=none")
        assert "Nothing to replay" in nothing.text and 'action="/dead-letters/replay-all"' not in (
            nothing.text
        )
    assert all(_replayed_job(conn, d) is not None for d in counted)
    assert _replayed_job(conn, late) is None and _replayed_job(conn, other) is None


def test_the_server_refuses_what_the_page_does_not_offer(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    viewer = add_user(conn, tenant, Role.VIEWER)
    member = add_user(conn, tenant, Role.MEMBER)
    _, letter = dead_letter(conn, tenant)
    with web_client(db_url) as client:
        as_viewer = sign_in(client, conn, viewer)
        forged = as_viewer.post(f"/dead-letters/{letter}/replay")
        assert forged.status_code == 403
        no_token = as_viewer.forge(f"/dead-letters/{letter}/replay", origin="http://testserver")
        assert no_token.status_code == 403

        as_member = sign_in(client, conn, member)
        assert as_member.get("/dead-letters/confirm").status_code == 403
        for form in ({"up_to_id": str(letter)}, {}):
            refused = as_member.post("/dead-letters/replay-all", form)
            assert refused.status_code == 403
        assert 'id="replay-all"' not in as_member.get("/dead-letters").text
    assert _replayed_job(conn, letter) is None


def test_another_projects_letter_is_answered_like_a_missing_one(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    other = make_tenant(conn)
    create_queue(conn, other, "emails")
    _, theirs = dead_letter(conn, other)
    _, ours = dead_letter(conn, tenant)
    admin = add_user(conn, tenant, Role.ADMIN)
    missing_id = max(theirs, ours) + 1000

    def without_request_id(text: str) -> str:
        return re.sub(r"request [0-9a-f]+", "request -", text)

    with web_client(db_url) as client:
        session = sign_in(client, conn, admin)
        for path in ("/dead-letters/{}", "/fragments/dead-letters/{}"):
            foreign = session.get(path.format(theirs))
            missing = session.get(path.format(missing_id))
            assert foreign.status_code == missing.status_code == 404
            assert without_request_id(foreign.text) == without_request_id(missing.text)
        foreign_post = session.post(f"/dead-letters/{theirs}/replay")
        missing_post = session.post(f"/dead-letters/{missing_id}/replay")
        assert foreign_post.status_code == missing_post.status_code == 404
        assert without_request_id(foreign_post.text) == without_request_id(missing_post.text)
        assert _rows(session.get("/dead-letters").text) == {ours: "false"}
        confirm = session.get("/dead-letters/confirm")
        assert 'data-count="1"' in confirm.text
        session.post("/dead-letters/replay-all", {"up_to_id": str(max(theirs, ours))})
    assert _replayed_job(conn, theirs) is None
    assert _replayed_job(conn, ours) is not None
