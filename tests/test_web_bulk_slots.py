"""Bulk runs are bounded per web process: one more than MAX_RUNS is refused with 429 at once
(it would otherwise wait for a second pool connection until the pool's timeout), dry runs
are never limited, and a slot is given back when a run fails."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from codity.web import bulk_slots
from codity.web.access import Role
from codity.web.errors import ApiError
from tests.webapp import add_user, make_tenant, web_client


def test_one_run_more_than_the_limit_is_refused_and_slots_come_back() -> None:
    with bulk_slots.bulk_slot(), bulk_slots.bulk_slot():
        with pytest.raises(ApiError) as refused, bulk_slots.bulk_slot():
            pass
        assert refused.value.status == 429 and refused.value.headers["Retry-After"]
    with pytest.raises(RuntimeError), bulk_slots.bulk_slot():
        raise RuntimeError("a batch failed")
    with bulk_slots.bulk_slot(), bulk_slots.bulk_slot():
        pass  # both slots were given back


def test_a_busy_server_answers_429_for_runs_and_still_counts_dry_runs(
    db_url: str, conn: psycopg.Connection[Any]
) -> None:
    tenant = make_tenant(conn)
    admin = add_user(conn, tenant, Role.ADMIN)
    conn.execute("SELECT * FROM codity.create_queue('emails', %s)", [tenant.project_id])
    job = conn.execute(
        "SELECT job_id FROM codity.enqueue('emails', 't', p_project_id => %s)",
        [tenant.project_id],
    ).fetchone()
    assert job is not None
    with web_client(db_url) as client, bulk_slots.bulk_slot(), bulk_slots.bulk_slot():
        cancel = {"action": "cancel", "ids": [job[0]]}
        busy = client.post("/api/v1/jobs/bulk", json=cancel, headers=admin.headers)
        assert busy.status_code == 429 and busy.json()["error"]["code"] == "bulk_busy"
        replay = client.post(
            "/api/v1/dead-letters/replay", json={"up_to_id": 1}, headers=admin.headers
        )
        assert replay.status_code == 429
        dry = client.post(
            "/api/v1/jobs/bulk", json={**cancel, "dry_run": True}, headers=admin.headers
        )
        assert dry.status_code == 200 and dry.json()["data"]["matched"] == 1
    status = conn.execute("SELECT status::text FROM codity.jobs WHERE id = %s", job).fetchone()
    assert status == ("queued",), "the refused run changed nothing"
