"""GET /api/v1/metrics: exact figures from the database, counters that survive pruning,
one project per credential, and nothing private in a label.

Jobs move through the SQL API at the database's own time (the window and the live counts
read now()); the scrape is parsed with prometheus_client's own parser.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families
from psycopg.types.json import Jsonb

from codity.web.access import Role
from codity.web.endpoints.metrics import CONTENT_TYPE
from tests.sqlapi import NO_BACKOFF, create_queue, row
from tests.webapp import Tenant, api_key, bearer, make_tenant, web_client

SECRET = "someone@example.com"

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _scrape(client: Any, key: str) -> Samples:
    response = client.get("/api/v1/metrics", headers=bearer(key))
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == CONTENT_TYPE
    assert SECRET not in response.text
    found: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def _value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def _project_with_jobs(conn: psycopg.Connection) -> tuple[Tenant, str]:
    """A project whose queue 'mail' holds a claimable job and two scheduled ones (one
    delayed, one retry), with two completions, two failed executions and one dead letter
    behind it; and a viewer key."""
    tenant = make_tenant(conn)
    create_queue(conn, "mail", project_id=tenant.project_id, max_attempts=2, **NO_BACKOFF)
    (worker,) = row(
        conn,
        "SELECT codity.register_worker('w', ARRAY['mail'], p_project_id => %s)",
        [tenant.project_id],
    )
    (queue_id,) = row(
        conn, "SELECT id FROM codity.queues WHERE project_id = %s", [tenant.project_id]
    )
    enqueue = "SELECT job_id FROM codity.enqueue_in_queue(%s, 't', %s, p_run_at => %s)"
    for _ in range(5):
        conn.execute(enqueue, [queue_id, Jsonb({"to": SECRET}), None])
    conn.execute(enqueue, [queue_id, Jsonb({}), "2999-01-01T00:00:00Z"])  # scheduled
    claimed = conn.execute(
        "SELECT job_id, fence FROM codity.claim(%s, 'mail', 4, p_start => true)", [worker]
    ).fetchall()
    assert len(claimed) == 4
    for job, fence in claimed[:2]:
        conn.execute("SELECT * FROM codity.complete(%s, %s)", [job, fence])
    conn.execute("SELECT * FROM codity.fail(%s, %s, 'flaky')", list(claimed[2]))  # retried
    conn.execute("SELECT * FROM codity.fail(%s, %s, 'fatal', false)", list(claimed[3]))  # dead
    return tenant, api_key(conn, tenant, Role.VIEWER)


def test_the_scrape_reports_each_state_and_counter_exactly(
    db_url: str, conn: psycopg.Connection
) -> None:
    _, key = _project_with_jobs(conn)
    with web_client(db_url) as client:
        samples = _scrape(client, key)
    jobs = {state: _value(samples, "codity_queue_jobs", queue="mail", state=state)
            for state in ("claimable", "scheduled", "running")}  # fmt: skip
    assert jobs == {"claimable": 1, "scheduled": 2, "running": 0}  # a delayed job, a retry
    assert _value(samples, "codity_executions_completed_total", queue="mail") == 2
    assert _value(samples, "codity_executions_failed_total", queue="mail") == 2
    assert _value(samples, "codity_jobs_dead_lettered_total", queue="mail") == 1
    assert _value(samples, "codity_executions_reaped_total", queue="mail") == 0
    assert _value(samples, "codity_workers", state="alive") == 1
    assert _value(samples, "codity_workers", state="dead") == 0
    assert _value(samples, "codity_queue_paused", queue="mail") == 0
    assert _value(samples, "codity_queue_oldest_claimable_age_seconds", queue="mail") >= 0
    for quantile in ("0.5", "0.9", "0.99"):
        assert _value(samples, "codity_execution_duration_seconds", queue="mail",
                      quantile=quantile) >= 0  # fmt: skip
        assert _value(samples, "codity_queue_wait_seconds", queue="mail", quantile=quantile) >= 0


def test_counters_do_not_fall_when_the_rows_they_counted_are_pruned(
    db_url: str, conn: psycopg.Connection
) -> None:
    """Without codity.queue_totals the counters would be counts of rows that retention
    deletes, and would drop to zero here."""
    _, key = _project_with_jobs(conn)
    counters = ("codity_executions_completed_total", "codity_executions_failed_total",
                "codity_jobs_dead_lettered_total")  # fmt: skip
    with web_client(db_url) as client:
        before = {name: _value(_scrape(client, key), name, queue="mail") for name in counters}
        # An hour on: the minutes are rolled up into the totals, then everything finished
        # is pruned (completed after 7 days, dead letters after 30).
        conn.execute("SELECT codity.roll_up(now() + interval '1 hour')")
        pruned = row(conn, "SELECT * FROM codity.prune(now() + interval '31 days')")
        assert pruned[0] == 3  # two completed jobs, one dead-lettered
        assert row(conn, "SELECT count(*) FROM codity.job_executions") == (1,)  # the retry's
        after = {name: _value(_scrape(client, key), name, queue="mail") for name in counters}
    assert after == before == {counters[0]: 2, counters[1]: 2, counters[2]: 1}


def test_a_credential_sees_its_own_project_only(db_url: str, conn: psycopg.Connection) -> None:
    _project_with_jobs(conn)
    other = make_tenant(conn)
    create_queue(conn, "billing", project_id=other.project_id)
    key = api_key(conn, other, Role.VIEWER)
    with web_client(db_url) as client:
        samples = _scrape(client, key)
        refused = client.get("/api/v1/metrics")
    queues = {dict(labels).get("queue") for _, labels in samples} - {None}
    assert queues == {"billing"}
    assert _value(samples, "codity_workers", state="alive") == 0
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "unauthorized"


def test_labels_are_queues_states_quantiles_and_checks_only(
    db_url: str, conn: psycopg.Connection
) -> None:
    _, key = _project_with_jobs(conn)
    with web_client(db_url) as client:
        samples = _scrape(client, key)
    names = {name for name, _ in samples}
    assert all(name.startswith("codity_") for name in names)
    assert {k for _, labels in samples for k, _ in labels} <= {"queue", "state", "quantile",
                                                              "check"}  # fmt: skip


@pytest.mark.parametrize("role", [Role.VIEWER, Role.ADMIN])
def test_any_role_of_the_project_may_scrape(
    db_url: str, conn: psycopg.Connection, role: Role
) -> None:
    tenant = make_tenant(conn)
    key = api_key(conn, tenant, role)
    with web_client(db_url) as client:
        assert _scrape(client, key) is not None
