"""POST /api/v1/jobs/bulk over HTTP: cancel or retry by ids (member) or every job matching
a filter (admin), against a real PostgreSQL.

The world is built through the SQL API (enqueue_many, claim, fail) as a worker would; the
bulk route is then what an operator does. What is checked is what the rows say afterwards,
not only what the answer claims.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from codity.web.access import Role
from codity.web.endpoints.jobs_bulk import BATCH
from tests.sqlapi import one
from tests.test_web_jobs import create_queue, dead_letter
from tests.webapp import Tenant, add_user, api_key, bearer, make_tenant, web_client

BULK = "/api/v1/jobs/bulk"


@pytest.fixture
def tenant(conn: psycopg.Connection) -> Tenant:
    made = make_tenant(conn)
    create_queue(conn, made, "emails")
    create_queue(conn, made, "reports")
    return made


def enqueue_many(
    conn: psycopg.Connection,
    tenant: Tenant,
    count: int,
    queue: str = "emails",
    task: str = "send",
    payload: dict[str, Any] | None = None,
) -> list[int]:
    """``count`` queued jobs in one call per 1000, in id order."""
    ids: list[int] = []
    for start in range(0, count, 1000):
        jobs = [{"task": task, "payload": payload or {}} for _ in range(min(1000, count - start))]
        rows = conn.execute(
            "SELECT job_id FROM codity.enqueue_many(%s, %s, %s)",
            [queue, Jsonb(jobs), tenant.project_id],
        ).fetchall()
        ids += [int(r[0]) for r in rows]
    return sorted(ids)


def statuses(conn: psycopg.Connection, ids: list[int]) -> dict[str, int]:
    rows = conn.execute(
        "SELECT status::text, count(*) FROM codity.jobs WHERE id = ANY(%s) GROUP BY 1", [ids]
    ).fetchall()
    return {str(s): int(n) for s, n in rows}


def post(client: Any, user: Any, body: dict[str, Any]) -> Any:
    return client.post(BULK, json=body, headers=user.headers)


def test_cancel_by_ids_cancels_what_applies_and_skips_the_rest(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    member = add_user(conn, tenant, Role.MEMBER)
    dead, _ = dead_letter(conn, tenant)
    queued = enqueue_many(conn, tenant, 3)
    other = make_tenant(conn)
    create_queue(conn, other, "emails")
    foreign = enqueue_many(conn, other, 1)
    missing = 9_000_000_000
    ids = [*queued, queued[0], dead, *foreign, missing]
    with web_client(db_url) as client:
        dry = post(client, member, {"action": "cancel", "ids": ids, "dry_run": True})
        assert dry.status_code == 200, dry.text
        assert dry.json()["data"] == {
            "action": "cancel",
            "matched": 6,
            "affected": 3,
            "skipped": 3,
            "up_to_id": None,
            "as_of": None,
            "dry_run": True,
            "batches": 0,
        }
        assert statuses(conn, queued) == {"queued": 3}, "a dry run changes nothing"

        run = post(client, member, {"action": "cancel", "ids": ids})
        assert run.status_code == 200, run.text
        assert run.json()["data"] | {"batches": None} == {
            "action": "cancel",
            "matched": 6,
            "affected": 3,
            "skipped": 3,
            "up_to_id": None,
            "as_of": None,
            "dry_run": False,
            "batches": None,
        }
    assert statuses(conn, queued) == {"cancelled": 3}
    assert statuses(conn, [dead]) == {"dead_letter": 1}
    assert statuses(conn, foreign) == {"queued": 1}, "another project's job is never touched"


def test_a_thousand_ids_go_in_two_batches(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    member = add_user(conn, tenant, Role.MEMBER)
    jobs = enqueue_many(conn, tenant, 1000)
    with web_client(db_url) as client:
        run = post(client, member, {"action": "cancel", "ids": jobs})
    assert run.status_code == 200, run.text
    done = run.json()["data"]
    assert (done["matched"], done["affected"], done["skipped"], done["batches"]) == (
        1000,
        1000,
        0,
        1000 // BATCH,
    )
    assert statuses(conn, jobs) == {"cancelled": 1000}


def test_retry_by_ids_requeues_dead_letters_only(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    member = add_user(conn, tenant, Role.MEMBER)
    dead = [dead_letter(conn, tenant)[0] for _ in range(2)]
    waiting = enqueue_many(conn, tenant, 1)
    with web_client(db_url) as client:
        run = post(client, member, {"action": "retry", "ids": [*dead, *waiting]})
    assert run.status_code == 200, run.text
    assert (run.json()["data"]["affected"], run.json()["data"]["skipped"]) == (2, 1)
    assert statuses(conn, dead) == {"queued": 2}
    assert conn.execute(
        "SELECT count(*) FROM codity.dead_letters WHERE job_id = ANY(%s) AND replayed_at IS NULL",
        [dead],
    ).fetchone() == (0,)


def test_filter_dry_run_counts_what_the_confirmed_run_does_and_later_jobs_are_left_alone(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    admin = add_user(conn, tenant, Role.ADMIN)
    sends = enqueue_many(conn, tenant, BATCH * 2 + 7, task="send")
    others = enqueue_many(conn, tenant, 5, task="other")
    elsewhere = enqueue_many(conn, tenant, 4, queue="reports", task="send")
    scope = {"queue": "emails", "task": "send"}
    with web_client(db_url) as client:
        dry = post(client, admin, {"action": "cancel", "filter": scope, "dry_run": True})
        assert dry.status_code == 200, dry.text
        counted = dry.json()["data"]
        assert counted["matched"] == counted["affected"] == len(sends)
        assert counted["up_to_id"] == max(sends)

        later = enqueue_many(conn, tenant, 3, task="send")
        body = {"action": "cancel", "filter": scope, "up_to_id": counted["up_to_id"]}
        run = post(client, admin, body)
    assert run.status_code == 200, run.text
    done = run.json()["data"]
    assert done["affected"] == counted["matched"], "does exactly what the dry run counted"
    assert done["skipped"] == 0
    assert done["batches"] == 3, "1,007 jobs in batches of 500"
    assert statuses(conn, sends) == {"cancelled": len(sends)}
    assert statuses(conn, later) == {"queued": 3}, "enqueued after the dry run: untouched"
    assert statuses(conn, others + elsewhere) == {"queued": 9}, "outside the filter: untouched"


def test_filter_retry_takes_only_dead_letters_and_respects_the_status_filter(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    admin = add_user(conn, tenant, Role.ADMIN)
    dead = [dead_letter(conn, tenant, task="send")[0] for _ in range(3)]
    queued = enqueue_many(conn, tenant, 2, task="send")
    with web_client(db_url) as client:
        nothing = post(
            client,
            admin,
            {"action": "retry", "filter": {"status": "queued"}, "dry_run": True},
        ).json()["data"]
        assert (nothing["matched"], nothing["up_to_id"]) == (0, None), (
            "retry does not apply to queued jobs"
        )
        run = post(client, admin, {"action": "retry", "filter": {"task": "send"}})
    assert run.status_code == 200, run.text
    assert run.json()["data"]["matched"] == run.json()["data"]["affected"] == 3
    assert statuses(conn, dead) == {"queued": 3}
    assert statuses(conn, queued) == {"queued": 2}


def test_filter_with_payload_containment_acts_only_on_matching_payloads(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    admin = add_user(conn, tenant, Role.ADMIN)
    mine = enqueue_many(conn, tenant, 2, payload={"customer": {"id": 42, "tier": "gold"}})
    theirs = enqueue_many(conn, tenant, 2, payload={"customer": {"id": 7}})
    with web_client(db_url) as client:
        run = post(
            client, admin, {"action": "cancel", "filter": {"payload": {"customer": {"id": 42}}}}
        )
    assert run.json()["data"]["affected"] == 2, run.text
    assert statuses(conn, mine) == {"cancelled": 2}
    assert statuses(conn, theirs) == {"queued": 2}


def test_a_filter_never_reaches_another_project(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    admin = add_user(conn, tenant, Role.ADMIN)
    other = make_tenant(conn)
    create_queue(conn, other, "emails")
    foreign = enqueue_many(conn, other, 5)
    mine = enqueue_many(conn, tenant, 1)
    with web_client(db_url) as client:
        dry = post(client, admin, {"action": "cancel", "filter": {}, "dry_run": True})
        assert dry.json()["data"]["matched"] == 1
        run = post(client, admin, {"action": "cancel", "filter": {"queue": "emails"}})
        assert run.json()["data"]["affected"] == 1
        by_id = post(client, admin, {"action": "cancel", "filter": {"id": foreign[0]}})
        assert by_id.json()["data"]["matched"] == 0
    assert statuses(conn, foreign) == {"queued": 5}
    assert statuses(conn, mine) == {"cancelled": 1}


def test_roles_viewer_refused_member_only_by_ids(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    viewer = add_user(conn, tenant, Role.VIEWER)
    member = add_user(conn, tenant, Role.MEMBER)
    jobs = enqueue_many(conn, tenant, 2)
    member_key = api_key(conn, tenant, Role.MEMBER)
    with web_client(db_url) as client:
        refused = post(client, viewer, {"action": "cancel", "ids": jobs})
        assert refused.status_code == 403, refused.text
        by_filter = post(client, member, {"action": "cancel", "filter": {}})
        assert by_filter.status_code == 403, by_filter.text
        assert "admin" in by_filter.json()["error"]["message"]
        key_filter = client.post(
            BULK,
            json={"action": "cancel", "filter": {}, "dry_run": True},
            headers=bearer(member_key),
        )
        assert key_filter.status_code == 403
    assert statuses(conn, jobs) == {"queued": 2}, "nothing written by refused calls"


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"action": "cancel"}, "either ids or filter"),
        ({"action": "cancel", "ids": [1], "filter": {}}, "either ids or filter"),
        ({"action": "cancel", "ids": []}, "at least 1"),
        ({"action": "cancel", "ids": list(range(1, 1002))}, "at most 1000"),
        ({"action": "cancel", "ids": [0]}, "greater than or equal to 1"),
        ({"action": "cancel", "ids": [1], "up_to_id": 5}, "bound a filter"),
        ({"action": "cancel", "ids": [1], "as_of": "2030-01-01T00:00:00Z"}, "bound a filter"),
        ({"action": "delete", "ids": [1]}, "'cancel' or 'retry'"),
        ({"action": "retry", "filter": {"payload": "[1]"}}, "payload must be a JSON object"),
        ({"action": "retry", "filter": {"status": "nope"}}, "Input should be"),
        ({"action": "retry", "filter": {"colour": "red"}}, "Extra inputs"),
    ],
)
def test_bad_input_is_a_clear_422_and_writes_nothing(
    db_url: str, conn: psycopg.Connection, tenant: Tenant, body: dict[str, Any], words: str
) -> None:
    admin = add_user(conn, tenant, Role.ADMIN)
    jobs = enqueue_many(conn, tenant, 1)
    with web_client(db_url) as client:
        answer = post(client, admin, body)
    assert answer.status_code == 422, answer.text
    assert words in answer.text
    assert statuses(conn, jobs) == {"queued": 1}


def test_the_bulk_route_is_in_the_openapi_document(db_url: str) -> None:
    with web_client(db_url) as client:
        schema = client.get("/api/v1/openapi.json").json()
    assert "post" in schema["paths"][BULK]


NODE_RANGE = 2**49
"""Where a Citus worker node draws its ids (group 2 << 48): ids with no order to the time."""


def test_a_confirmed_run_leaves_out_a_later_job_with_a_lower_id(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    """Rule 5 (DESIGN.md): on a Citus cluster a job enqueued on a worker node draws a high id,
    and a job enqueued later on the coordinator a low one. Shown here on one server by
    drawing the first jobs' ids from a node's range: the dry run's ``as_of`` leaves the later
    job out, and the old bound, ``up_to_id``, is shown to sweep it in."""
    admin = add_user(conn, tenant, Role.ADMIN)
    low = int(one(conn, "SELECT coalesce(max(id), 0) + 1000 FROM codity.jobs"))
    restart = "ALTER TABLE codity.jobs ALTER COLUMN id RESTART WITH {:d}"
    conn.execute(restart.format(NODE_RANGE))
    seen = enqueue_many(conn, tenant, 3, task="send")
    conn.execute(restart.format(low))
    scope = {"queue": "emails", "task": "send"}
    with web_client(db_url) as client:
        dry = post(client, admin, {"action": "cancel", "filter": scope, "dry_run": True})
        counted = dry.json()["data"]
        assert (counted["matched"], counted["up_to_id"]) == (3, max(seen))
        (later,) = enqueue_many(conn, tenant, 1, task="send")
        assert later < counted["up_to_id"], "the later job drew a lower id"

        body = {"action": "cancel", "filter": scope, "as_of": counted["as_of"]}
        run = post(client, admin, {**body, "dry_run": True}).json()["data"]
        assert run["matched"] == 3, "a dry run at the confirmed time counts what was shown"
        done = post(client, admin, body).json()["data"]
        assert (done["matched"], done["affected"], done["as_of"]) == (3, 3, counted["as_of"])
        assert statuses(conn, seen) == {"cancelled": 3}
        assert statuses(conn, [later]) == {"queued": 1}, "enqueued after the dry run: untouched"

        (again,) = enqueue_many(conn, tenant, 1, task="send")
        old = post(client, admin, {"action": "cancel", "filter": scope, "up_to_id": max(seen)})
        assert old.json()["data"]["affected"] == 2, "the id bound sweeps both later jobs in"
    assert statuses(conn, [later, again]) == {"cancelled": 2}


def test_an_as_of_in_the_future_counts_as_now(
    db_url: str, conn: psycopg.Connection, tenant: Tenant
) -> None:
    admin = add_user(conn, tenant, Role.ADMIN)
    enqueue_many(conn, tenant, 2, task="send")
    body = {"action": "cancel", "filter": {"task": "send"}, "dry_run": True}
    with web_client(db_url) as client:
        dry = post(client, admin, {**body, "as_of": "2999-01-01T00:00:00Z"}).json()["data"]
    assert dry["matched"] == 2 and dry["as_of"] < "2999"
