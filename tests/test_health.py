"""codity.health: each check sees its condition when a test causes it, and not before.

Every condition is real: a session left idle in a transaction, a prepared transaction, a
LISTEN session that never reads while notifications pile up, dead row versions vacuum may
not remove, a replication slot holding WAL. Each detector is shown quiet first, then
caused, then (where it can be) quiet again.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from codity.status import collect_status, render_status
from codity.web.access import Role
from tests.dashboard import sign_in
from tests.sqlapi import create_queue, one
from tests.webapp import add_user, api_key, bearer, make_tenant, web_client


def _checks(conn: psycopg.Connection, *thresholds: Any) -> dict[str, tuple[float, bool, str]]:
    args = ", ".join(["%s"] * len(thresholds))
    rows = conn.execute(
        f"SELECT check_name, value, alarm, detail FROM codity.health({args})", thresholds
    ).fetchall()
    return {r[0]: (float(r[1]), bool(r[2]), str(r[3])) for r in rows}


def test_a_quiet_database_raises_no_alarm(conn: psycopg.Connection) -> None:
    checks = _checks(conn)
    assert set(checks) == {
        "oldest_transaction_seconds", "idle_in_transaction_sessions",
        "prepared_transaction_oldest_seconds", "notify_queue_usage_ratio", "jobs_dead_tuples",
        "claim_index_bytes_per_entry", "replication_slot_retained_bytes",
        "synchronous_standbys", "seconds_since_primary_changed", "workers_silent",
    }  # fmt: skip
    assert [name for name, (_, alarm, _) in checks.items() if alarm] == []


def test_a_session_idle_in_a_transaction_is_found(db_url: str, conn: psycopg.Connection) -> None:
    with psycopg.connect(db_url) as idle:
        # Began, took a transaction id (as any write does) and went idle: vacuum can remove
        # nothing newer from here on.
        idle.execute("SELECT pg_current_xact_id()")
        pid = idle.info.backend_pid
        time.sleep(1.2)
        checks = _checks(conn, 1.0)  # threshold 1 s: idle ones counted after 0.1 s
        seconds, alarm, detail = checks["oldest_transaction_seconds"]
        assert alarm and seconds >= 1.0
        assert f"pid {pid}, idle in transaction" in detail
        assert checks["idle_in_transaction_sessions"][:2] == (1.0, True)
        assert not _checks(conn, 60.0)["oldest_transaction_seconds"][1]
    after = _checks(conn, 1.0)
    assert not after["oldest_transaction_seconds"][1]
    assert not after["idle_in_transaction_sessions"][1]


def test_a_forgotten_prepared_transaction_is_found(db_url: str, conn: psycopg.Connection) -> None:
    if int(one(conn, "SELECT current_setting('max_prepared_transactions')::int")) == 0:
        # The test server enables them (tests/conftest.py, .ci/run); a server given through
        # CODITY_TEST_DATABASE_URL may not, and then no transaction can be prepared at all.
        pytest.fail("max_prepared_transactions is 0 on the test server: set it to 10")
    with psycopg.connect(db_url, autocommit=True) as other:
        other.execute("BEGIN")
        other.execute("SELECT codity.create_queue('prepared')")
        other.execute("PREPARE TRANSACTION 'codity-health-test'")
    try:
        time.sleep(1.1)
        seconds, alarm, detail = _checks(conn, 1.0)["prepared_transaction_oldest_seconds"]
        assert alarm and seconds >= 1.0 and "codity-health-test" in detail
    finally:
        conn.execute("ROLLBACK PREPARED 'codity-health-test'")
    assert _checks(conn, 1.0)["prepared_transaction_oldest_seconds"] == (0.0, False, "none")


def test_a_listener_that_never_reads_fills_the_notify_queue(
    db_url: str, conn: psycopg.Connection
) -> None:
    assert _checks(conn)["notify_queue_usage_ratio"][0] == 0
    with psycopg.connect(db_url, autocommit=True) as deaf:
        deaf.execute("LISTEN codity_health_test")
        # A listener inside a transaction takes nothing off the queue until it ends: the
        # queue cannot move past what it has not read.
        deaf.execute("BEGIN")
        deaf.execute("SELECT 1")
        payload = "x" * 7000
        for _ in range(300):  # about 2 MB of notifications, one transaction each
            conn.execute("SELECT pg_notify('codity_health_test', %s)", [payload])
        usage, alarm, _ = _checks(conn, 300, 0.0)["notify_queue_usage_ratio"]
        assert usage > 0 and alarm
        assert not _checks(conn)["notify_queue_usage_ratio"][1]  # far from the default 0.5


def test_dead_row_versions_vacuum_cannot_remove_are_found(
    db_url: str, conn: psycopg.Connection
) -> None:
    """An open snapshot keeps every row version the jobs' updates leave behind."""
    conn.execute("ALTER TABLE codity.jobs SET (autovacuum_enabled = false)")
    create_queue(conn, "churn")
    conn.execute(
        "SELECT codity.enqueue_many('churn', (SELECT jsonb_agg(jsonb_build_object('task', 't'))"
        " FROM generate_series(1, 6000)))"
    )
    with psycopg.connect(db_url) as holder:
        holder.execute("SELECT pg_current_xact_id()")  # the horizon stops here
        for _ in range(3):
            conn.execute(
                "UPDATE codity.jobs SET priority = priority + 1 WHERE queue_id IS NOT NULL"
            )
        conn.execute("VACUUM codity.jobs")  # removes nothing: the snapshot still sees them
        conn.execute("SELECT pg_stat_force_next_flush()")
        dead, alarm, _ = _checks(conn)["jobs_dead_tuples"]
        assert dead >= 18_000 and alarm
        _the_alarm_shows_everywhere(db_url, conn, "jobs_dead_tuples")
    conn.execute("VACUUM codity.jobs")
    conn.execute("SELECT pg_stat_force_next_flush()")
    assert _checks(conn)["jobs_dead_tuples"][:2] == (0.0, False)


def _the_alarm_shows_everywhere(db_url: str, conn: psycopg.Connection, check: str) -> None:
    """An alarm raised now is in codity status, the overview (API and dashboard) and the
    metrics."""
    status = collect_status(db_url)
    assert 'Health (docs/RUNBOOK.md, "Health alarms")\nALARM' in render_status(status)
    assert check in render_status(status).split("Health (")[1]
    tenant = make_tenant(conn)
    viewer = add_user(conn, tenant, Role.VIEWER)
    with web_client(db_url) as client:
        overview = client.get("/api/v1/overview", headers=viewer.headers).json()["data"]
        assert [a["check"] for a in overview["health"]] == [check]
        metrics = client.get("/api/v1/metrics", headers=bearer(api_key(conn, tenant, Role.VIEWER)))
        assert f'codity_health_alarm{{check="{check}"}} 1.0' in metrics.text
        page = sign_in(client, conn, viewer).get("/fragments/overview")
        assert page.status_code == 200
        assert f'<span class="badge bad">{check.replace("_", " ")}</span>' in page.text


def test_a_bloated_claim_index_is_found(conn: psycopg.Connection) -> None:
    """Two hundred thousand jobs queued and then all claimed: the claim index keeps its
    pages (about 10 MB) for the few entries left."""
    conn.execute("ALTER TABLE codity.jobs SET (autovacuum_enabled = false)")
    create_queue(conn, "bloat")
    (queue_id,) = conn.execute("SELECT id FROM codity.queues WHERE name = 'bloat'").fetchone() or ()
    conn.execute(
        "INSERT INTO codity.jobs (queue_id, project_id, task, status, run_at, max_attempts)"
        " SELECT q.id, q.project_id, 't', 'queued', now(), 3"
        " FROM codity.queues q, generate_series(1, 200000) WHERE q.id = %s",
        [queue_id],
    )
    conn.execute("VACUUM ANALYZE codity.jobs")
    assert not _checks(conn)["claim_index_bytes_per_entry"][1]
    conn.execute(
        "UPDATE codity.jobs SET status = 'cancelled', finished_at = now()"
        " WHERE queue_id = %s AND id %% 1000 <> 0",
        [queue_id],
    )
    conn.execute("VACUUM ANALYZE codity.jobs")  # the entries go; the pages stay
    per_entry, alarm, detail = _checks(conn)["claim_index_bytes_per_entry"]
    assert alarm and per_entry > 400, detail
    conn.execute("REINDEX INDEX codity.jobs_claim_idx")
    conn.execute("ANALYZE codity.jobs")
    assert not _checks(conn)["claim_index_bytes_per_entry"][1]


@pytest.fixture
def slot(conn: psycopg.Connection) -> Iterator[str]:
    name = f"codity_health_{conn.info.backend_pid}"
    conn.execute("SELECT pg_create_physical_replication_slot(%s, true)", [name])
    try:
        yield name
    finally:
        conn.execute("SELECT pg_drop_replication_slot(%s)", [name])


def test_a_replication_slot_that_holds_wal_is_found(conn: psycopg.Connection, slot: str) -> None:
    conn.execute("CREATE TABLE public.wal_filler AS SELECT g FROM generate_series(1, 200000) g")
    retained, alarm, detail = _checks(conn, 300, 0.5, 1_000_000)["replication_slot_retained_bytes"]
    assert retained > 1_000_000 and alarm
    assert detail == f"slot {slot}, inactive"
    assert not _checks(conn)["replication_slot_retained_bytes"][1]  # under the default 1 GiB


def test_a_slot_no_standby_streams_from_means_the_primary_runs_alone(
    conn: psycopg.Connection, slot: str
) -> None:
    """What pg_auto_failover leaves when the standby is lost and the monitor has dropped
    to asynchronous: the standby's slot, and nobody on it. (A synchronous_standby_names
    with nobody connected, the other half of the check, would block every commit of the
    suite's shared server: tests/test_failover_*.py cause it on a real pair.)"""
    count, alarm, detail = _checks(conn)["synchronous_standbys"]
    assert (count, alarm) == (0, True)
    assert detail == f"no standby streams from slot {slot}: the primary runs alone"


def test_workers_silent_for_two_heartbeats_are_counted_until_they_beat(
    conn: psycopg.Connection,
) -> None:
    create_queue(conn, "work")
    worker = one(
        conn, "SELECT codity.register_worker('quiet', ARRAY['work'], p_heartbeat_seconds => 1)"
    )
    assert _checks(conn)["workers_silent"][:2] == (0, False)
    # Its last beat 2.5 s ago, at a promised 1 s: reconnecting, or about to be swept.
    conn.execute(
        "UPDATE codity.workers SET last_heartbeat_at = clock_timestamp() - interval '2.5 s'"
        " WHERE id = %s",
        [worker],
    )
    assert _checks(conn)["workers_silent"][:2] == (1, True)
    conn.execute("SELECT * FROM codity.heartbeat(%s)", [worker])
    assert _checks(conn)["workers_silent"][:2] == (0, False)


def test_a_primary_that_never_changed_says_so_and_the_check_is_hidden_without_pg_monitor(
    conn: psycopg.Connection,
) -> None:
    """A promotion is caused for real in tests/test_failover_rig.py (marker failover)."""
    assert _checks(conn)["seconds_since_primary_changed"] == (
        -1,
        False,
        "timeline 1: never changed",
    )
    conn.execute("SET ROLE codity_readonly")
    try:
        value, alarm, detail = _checks(conn)["seconds_since_primary_changed"]
    finally:
        conn.execute("RESET ROLE")
    assert (value, alarm) == (-1, False)
    assert detail == "hidden: grant pg_monitor to see when the primary changed"


def test_thresholds_out_of_range_are_refused(conn: psycopg.Connection) -> None:
    for bad in ((0, 0.5, 1), (300, 1.5, 1), (300, 0.5, -1)):
        with pytest.raises(psycopg.Error) as caught:
            _checks(conn, *bad)
        assert caught.value.sqlstate == "CD010"


def test_metrics_show_every_check_and_its_alarm(db_url: str, conn: psycopg.Connection) -> None:
    tenant = make_tenant(conn)
    key = api_key(conn, tenant, Role.VIEWER)
    with psycopg.connect(db_url) as idle:
        idle.execute("SELECT pg_current_xact_id()")  # idle in transaction from here on
        time.sleep(0.2)
        with web_client(db_url) as client:
            text = client.get("/api/v1/metrics", headers=bearer(key)).text
    for name in _checks(conn):
        assert f"\ncodity_db_{name} " in text
        assert f'codity_health_alarm{{check="{name}"}}' in text
    assert "codity_db_idle_in_transaction_sessions 0.0" in text  # under 30 s: not yet
