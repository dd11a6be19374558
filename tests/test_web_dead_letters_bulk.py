"""Dead letters over HTTP for the dashboard: the capped count and filters of the list, and
replay-all as a confirmed two-step action (a dry run's count and ``up_to_id``, then the run
bounded by it, in batches), against a real PostgreSQL.

Letters are made the way production makes them (enqueue, claim, start, fail with one
attempt allowed: tests.test_web_jobs.dead_letter). Batches are made small by setting the
module's ``BATCH`` so several run without hundreds of letters.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from starlette.testclient import TestClient

from codity.web.access import Role
from codity.web.endpoints import dead_letters as endpoint
from tests.dashboard import sign_in
from tests.sqlapi import one
from tests.test_web_jobs import create_queue, dead_letter
from tests.webapp import Tenant, User, add_user, make_tenant, web_client

LIST = "/api/v1/dead-letters"
REPLAY = "/api/v1/dead-letters/replay"


@pytest.fixture
def tenant(conn: psycopg.Connection) -> Tenant:
    made = make_tenant(conn)
    create_queue(conn, made, "emails")
    create_queue(conn, made, "reports")
    return made


def _replay(client: TestClient, user: User, **body: Any) -> dict[str, Any]:
    response = client.post(REPLAY, json=body, headers=user.headers)
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()["data"]
    return data


def _unreplayed(conn: psycopg.Connection, tenant: Tenant) -> set[int]:
    rows = conn.execute(
        "SELECT d.id FROM codity.dead_letters d JOIN codity.queues q ON q.id = d.queue_id"
        " WHERE q.project_id = %s AND d.replayed_at IS NULL",
        [tenant.project_id],
    ).fetchall()
    return {int(r[0]) for r in rows}


def test_the_list_counts_what_its_filters_match_and_pages_by_id(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    viewer = add_user(conn, tenant, Role.VIEWER)
    member = add_user(conn, tenant, Role.MEMBER)
    sends = [dead_letter(conn, tenant, "emails", "emails.send")[1] for _ in range(3)]
    build = dead_letter(conn, tenant, "reports", "reports.build")[1]
    with web_client(db_url) as client:
        replayed = client.post(f"{LIST}/{sends[0]}/replay", headers=member.headers)
        assert replayed.status_code == 200, replayed.text

        def listed(**query: Any) -> dict[str, Any]:
            response = client.get(LIST, params=query, headers=viewer.headers)
            assert response.status_code == 200, response.text
            body: dict[str, Any] = response.json()
            return body

        every = listed()
        assert [d["id"] for d in every["data"]] == [build, *sends[::-1]]
        assert (every["meta"]["count"], every["meta"]["count_capped"]) == (4, False)
        emails = listed(queue="emails", replayed="false")
        assert [d["id"] for d in emails["data"]] == [sends[2], sends[1]]
        assert emails["meta"]["count"] == 2
        done = listed(replayed="true")
        assert [d["id"] for d in done["data"]] == [sends[0]]
        assert done["data"][0]["replayed_job_id"] is not None
        assert listed(task="reports.build")["meta"]["count"] == 1
        nothing = listed(task="nothing.like.it")
        assert nothing["data"] == []
        assert (nothing["meta"]["count"], nothing["meta"]["count_capped"]) == (0, False)

        first = listed(limit=2)
        assert [d["id"] for d in first["data"]] == [build, sends[2]]
        assert first["meta"]["count"] == 4, "the count is of every match, not of the page"
        second = listed(limit=2, cursor=first["meta"]["next_cursor"])
        assert [d["id"] for d in second["data"]] == [sends[1], sends[0]]
        assert second["meta"]["next_cursor"] is None


def test_a_confirmed_replay_all_replays_exactly_what_its_dry_run_counted(
    db_url: str, conn: psycopg.Connection, tenant: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    admin = add_user(conn, tenant, Role.ADMIN)
    counted = [dead_letter(conn, tenant, "emails", "emails.send")[1] for _ in range(5)]
    other_task = dead_letter(conn, tenant, "emails", "emails.digest")[1]
    monkeypatch.setattr(endpoint, "BATCH", 2)
    batches: list[int] = []
    real_batch = endpoint._replay_batch

    async def counting(call: Any, params: dict[str, Any]) -> list[dict[str, Any]]:
        found = await real_batch(call, params)
        batches.append(len(found))
        return found

    monkeypatch.setattr(endpoint, "_replay_batch", counting)
    with web_client(db_url) as client:
        dry = _replay(client, admin, queue="emails", task="emails.send", dry_run=True)
        assert dry.pop("as_of"), "a dry run answers the time it counted at"
        assert dry == {
            "count": 5,
            "matched": 5,
            "affected": 5,
            "skipped": 0,
            "up_to_id": max(counted),
            "dry_run": True,
            "batches": 0,
            "job_ids": [],
            "dead_letter_ids": [],
            "ids_truncated": False,
        }
        assert _unreplayed(conn, tenant) == {*counted, other_task}, "a dry run replays nothing"

        late = dead_letter(conn, tenant, "emails", "emails.send")[1]
        assert late > dry["up_to_id"]
        run = _replay(client, admin, queue="emails", task="emails.send", up_to_id=dry["up_to_id"])
        assert (run["matched"], run["affected"], run["skipped"]) == (5, dry["affected"], 0)
        assert run["batches"] == 3
        assert sorted(run["dead_letter_ids"]) == counted
        assert batches == [2, 2, 1], "five letters in batches of two"
        assert _unreplayed(conn, tenant) == {other_task, late}, "the late letter was left alone"

        statuses = conn.execute(
            "SELECT status::text, attempt FROM codity.jobs WHERE id = ANY(%s)", [run["job_ids"]]
        ).fetchall()
        assert statuses == [("queued", 0)] * 5
        assert run["ids_truncated"] is False

        monkeypatch.setattr(endpoint, "IDS_SHOWN", 1)
        create_queue(conn, tenant, "more")
        more = [dead_letter(conn, tenant, "more", "emails.send")[1] for _ in range(3)]
        last = _replay(client, admin, queue="more", up_to_id=max(more))
        assert last["affected"] == 3
        assert (len(last["job_ids"]), len(last["dead_letter_ids"])) == (1, 1)
        assert last["ids_truncated"] is True


def test_letters_another_replay_took_after_the_dry_run_are_skipped(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    admin = add_user(conn, tenant, Role.ADMIN)
    letters = [dead_letter(conn, tenant)[1] for _ in range(3)]
    with web_client(db_url) as client:
        dry = _replay(client, admin, dry_run=True)
        assert dry["count"] == 3
        taken = client.post(f"{LIST}/{letters[1]}/replay", headers=admin.headers)
        assert taken.status_code == 200
        run = _replay(client, admin, up_to_id=dry["up_to_id"], confirmed=dry["count"])
        assert (run["affected"], sorted(run["dead_letter_ids"])) == (2, [letters[0], letters[2]])
        assert run["skipped"] == 1, "confirmed three, another replay took one"
        again = _replay(client, admin, up_to_id=dry["up_to_id"])
        assert (again["matched"], again["affected"], again["up_to_id"]) == (0, 0, None)
        assert again["skipped"] == 0, "unconfirmed: counted against what was in scope"
        gone = _replay(client, admin, up_to_id=dry["up_to_id"], confirmed=3)
        assert (gone["affected"], gone["skipped"], gone["batches"]) == (0, 3, 0)


def test_replay_all_never_touches_another_project(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    other = make_tenant(conn)
    create_queue(conn, other, "emails")
    theirs = [dead_letter(conn, other)[1] for _ in range(2)]
    ours = dead_letter(conn, tenant)[1]
    admin = add_user(conn, tenant, Role.ADMIN)
    with web_client(db_url) as client:
        dry = _replay(client, admin, dry_run=True)
        assert (dry["count"], dry["up_to_id"]) == (1, ours)
        run = _replay(client, admin, up_to_id=max(ours, *theirs))
        assert run["dead_letter_ids"] == [ours]
        assert _unreplayed(conn, other) == set(theirs)

        missing = client.post(f"{LIST}/{max(theirs) + 1000}/replay", headers=admin.headers)
        foreign = client.post(f"{LIST}/{theirs[0]}/replay", headers=admin.headers)
        assert foreign.status_code == missing.status_code == 404
        bodies = [r.json() for r in (missing, foreign)]
        for body in bodies:
            body["error"].pop("request_id")
        assert bodies[0] == bodies[1]
        assert client.get(f"{LIST}/{theirs[0]}", headers=admin.headers).status_code == 404


def test_replay_all_is_for_admins_and_refuses_bad_bounds(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    letter = dead_letter(conn, tenant)[1]
    member = add_user(conn, tenant, Role.MEMBER)
    admin = add_user(conn, tenant, Role.ADMIN)
    with web_client(db_url) as client:
        for allowed in ({"dry_run": True}, {"up_to_id": letter}):
            refused = client.post(REPLAY, json=allowed, headers=member.headers)
            assert refused.status_code == 403, refused.text
        bounds: list[tuple[dict[str, Any], str]] = [
            ({"up_to_id": 0}, "up_to_id"),
            ({"up_to_id": "many"}, "up_to_id"),
            ({"dry_run": "perhaps"}, "dry_run"),
            ({"limit": 0}, "limit"),
            ({"confirmed": -1}, "confirmed"),
        ]
        for body, field in bounds:
            bad = client.post(REPLAY, json=body, headers=admin.headers)
            assert bad.status_code == 422, bad.text
            details = bad.json()["error"]["details"]
            assert [d["location"] for d in details] == [["body", field]], details
        assert _unreplayed(conn, tenant) == {letter}


def test_the_sql_function_takes_the_same_bounds_from_psql(
    conn: psycopg.Connection, tenant: Tenant
) -> None:
    first, second = (dead_letter(conn, tenant)[1] for _ in range(2))
    rows = conn.execute(
        "SELECT dead_letter_id FROM codity.replay_dead_letters(%s, 'emails', p_limit => 10,"
        " p_up_to_id => %s)",
        [tenant.project_id, first],
    ).fetchall()
    assert [r[0] for r in rows] == [first]
    assert conn.execute(
        "SELECT count(*) FROM codity.replay_dead_letters(%s, p_dead_after => now())",
        [tenant.project_id],
    ).fetchone() == (0,)
    assert _unreplayed(conn, tenant) == {second}


@pytest.mark.parametrize(
    "spread",
    [(2_600,) * 4, (2_400,) * 4, (6_000, 30, 0, 0), (12_000, 0, 0, 0)],
    ids=["shares-full", "shares-short", "one-full-under-cap", "one-full-over-cap"],
)
def test_the_count_by_shares_is_the_capped_count_however_the_letters_spread(
    db_url: str, conn: psycopg.Connection, spread: tuple[int, ...]
) -> None:
    """The list's count is made queue by queue, each up to its share of the cap
    (codity.web.endpoints.queue_walk), and counted again as one set when the shares do not
    settle it; over four queues it is always the capped count, and a task filter narrows
    it. Break it: taking a count with a full share as exact gives 2,531 for 6,030."""
    tenant = make_tenant(conn)
    for n, letters in enumerate(spread):
        create_queue(conn, tenant, f"q{n}")
        conn.execute(
            "INSERT INTO codity.dead_letters"
            " (queue_id, project_id, task, payload, reason, attempts, dead_at)"
            " SELECT q.id, q.project_id, CASE WHEN g %% 2 = 0 THEN 'even' ELSE 'odd' END, '{}',"
            "        'failed', 1, now() - g * interval '1 second'"
            " FROM codity.queues q, generate_series(1, %s) g"
            " WHERE q.project_id = %s AND q.name = %s",
            [letters, tenant.project_id, f"q{n}"],
        )
    viewer = add_user(conn, tenant, Role.VIEWER)
    total, even = sum(spread), sum(n // 2 for n in spread)
    with web_client(db_url) as client:
        every = client.get(LIST, params={"limit": 1}, headers=viewer.headers).json()["meta"]
        narrowed = client.get(
            LIST, params={"limit": 1, "task": "even"}, headers=viewer.headers
        ).json()["meta"]
        one_queue = client.get(
            LIST, params={"limit": 1, "queue": "q0"}, headers=viewer.headers
        ).json()["meta"]
    assert (every["count"], every["count_capped"]) == (min(total, 10_000), total > 10_000)
    assert (narrowed["count"], narrowed["count_capped"]) == (min(even, 10_000), even > 10_000)
    first = spread[0]
    assert (one_queue["count"], one_queue["count_capped"]) == (min(first, 10_000), first > 10_000)


def test_a_count_past_the_cap_says_so_on_the_api_and_the_page(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    """10,001 letters (inserted as the owner, as a long outage would leave them)."""
    conn.execute(
        "INSERT INTO codity.dead_letters"
        " (queue_id, project_id, task, payload, reason, attempts, dead_at)"
        " SELECT q.id, q.project_id, 'emails.send', '{}', 'failed', 1,"
        "        now() - g * interval '1 second'"
        " FROM codity.queues q, generate_series(1, 10001) g"
        " WHERE q.project_id = %s AND q.name = 'emails'",
        [tenant.project_id],
    )
    admin = add_user(conn, tenant, Role.ADMIN)
    with web_client(db_url) as client:
        listed = client.get(LIST, params={"limit": 1}, headers=admin.headers).json()
        assert (listed["meta"]["count"], listed["meta"]["count_capped"]) == (10_000, True)
        session = sign_in(client, conn, admin)
        page = session.get("/dead-letters")
        assert 'data-count="10000" data-capped="true"' in page.text
        assert "Replay all 10,000+ matching" in page.text
        confirm = session.get("/dead-letters/confirm")
        assert "Replay 10,001 dead letters in every queue" in confirm.text, "exact when confirming"


def test_a_confirmed_replay_all_leaves_out_a_later_letter_with_a_lower_id(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    """Rule 5 (DESIGN.md): on a Citus cluster a letter written on a worker node draws a
    high id, a later one on the coordinator a low one. Shown here on one server by drawing
    the first letters' ids from a node's range: the dry run's ``as_of`` leaves the later
    letter out, where the old bound, ``up_to_id``, sweeps it in."""
    admin = add_user(conn, tenant, Role.ADMIN)
    low = int(one(conn, "SELECT coalesce(max(id), 0) + 1000 FROM codity.dead_letters"))
    restart = "ALTER TABLE codity.dead_letters ALTER COLUMN id RESTART WITH {:d}"
    conn.execute(restart.format(2**49))
    first = [dead_letter(conn, tenant, "emails", "emails.send")[1] for _ in range(2)]
    conn.execute(restart.format(low))
    with web_client(db_url) as client:
        dry = _replay(client, admin, dry_run=True)
        assert (dry["count"], dry["up_to_id"]) == (2, max(first))
        late = dead_letter(conn, tenant, "emails", "emails.send")[1]
        assert late < dry["up_to_id"], "the later letter drew a lower id"
        run = _replay(client, admin, as_of=dry["as_of"], confirmed=dry["count"])
        assert sorted(run["dead_letter_ids"]) == first
        assert (run["matched"], run["affected"], run["skipped"]) == (2, 2, 0)
        assert _unreplayed(conn, tenant) == {late}, "the later letter was left alone"

        old = _replay(client, admin, up_to_id=dry["up_to_id"])
        assert old["dead_letter_ids"] == [late], "the id bound sweeps the later letter in"
