"""Per-queue limits, enforced by the claim: never N + 1 jobs at once, never R + 1 claims in a
window, whatever the number of workers (migration 0023, DESIGN_DECISIONS 54).

The exactness is shown twice: with a driven interleaving (a claim held open while a second
one runs: without the limiter's lock the second hands out the N + 1st job) and with real
worker processes, whose handlers' own intervals never overlap more than N deep and whose
claims never exceed R in any window of the database's clock.
"""

from __future__ import annotations

import threading
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from codity.web.access import Role
from tests.dashboard import sign_in
from tests.processes import Processes, wait_until
from tests.sqlapi import create_queue, one, row
from tests.webapp import add_user, make_tenant, web_client

Conn = psycopg.Connection[Any]


def _jobs(conn: Conn, queue: str, n: int, payload: dict[str, Any] | None = None,
          task: str = "t") -> None:  # fmt: skip
    conn.execute(
        "SELECT codity.enqueue_many(%s, (SELECT jsonb_agg(jsonb_build_object("
        "'task', %s::text, 'payload', %s::jsonb)) FROM generate_series(1, %s)))",
        [queue, task, Jsonb(payload or {}), n],
    )


def _worker(conn: Conn, queue: str) -> int:
    return int(one(conn, "SELECT codity.register_worker('w', ARRAY[%s])", [queue]))


def _claim(conn: Conn, worker: int, queue: str, limit: int) -> int:
    return len(
        conn.execute("SELECT 1 FROM codity.claim(%s, %s, %s)", [worker, queue, limit]).fetchall()
    )


def _running(conn: Conn, queue: str) -> int:
    return int(one(conn, "SELECT count(*) FROM codity.jobs j JOIN codity.queues q"
                         " ON q.id = j.queue_id WHERE q.name = %s"
                         " AND j.status IN ('claimed', 'running')", [queue]))  # fmt: skip


def test_a_claim_takes_no_more_than_the_room_left(conn: Conn) -> None:
    create_queue(conn, "capped", max_running=3)
    _jobs(conn, "capped", 10)
    worker = _worker(conn, "capped")
    assert _claim(conn, worker, "capped", 10) == 3
    assert _claim(conn, worker, "capped", 10) == 0
    job, fence = row(conn, "SELECT id, execution_seq FROM codity.jobs WHERE status = 'claimed'"
                           " ORDER BY id LIMIT 1")  # fmt: skip
    conn.execute("SELECT codity.start(%s, %s)", [job, fence])
    conn.execute("SELECT * FROM codity.complete(%s, %s)", [job, fence])
    assert _claim(conn, worker, "capped", 10) == 1
    create_queue(conn, "capped", max_running=0)  # removed
    assert _claim(conn, worker, "capped", 10) == 6


def test_a_concurrent_claim_waits_for_the_one_before_and_counts_its_jobs(db_url: str) -> None:
    """Claim A holds its transaction open with the last free slot; claim B, started while
    A is open, must not take another. Without the limiter row's lock B counts before A
    commits and hands out a second job."""
    with psycopg.connect(db_url, autocommit=True) as conn, psycopg.connect(db_url) as first:
        create_queue(conn, "one-at-a-time", max_running=1)
        _jobs(conn, "one-at-a-time", 5)
        worker = _worker(conn, "one-at-a-time")
        assert _claim(first, worker, "one-at-a-time", 1) == 1  # not committed yet
        second: list[int] = []
        other = threading.Thread(target=lambda: second.append(
            _claim(conn, worker, "one-at-a-time", 1)))  # fmt: skip
        other.start()
        other.join(0.5)
        assert other.is_alive(), "the second claim should wait for the first"
        first.commit()
        other.join(10)
        assert second == [0]
        assert _running(conn, "one-at-a-time") == 1


def test_a_rate_limit_counts_claims_per_window(conn: Conn) -> None:
    create_queue(conn, "metered", rate_limit=4, rate_period_seconds=60)
    _jobs(conn, "metered", 20)
    worker = _worker(conn, "metered")
    window = datetime.fromisoformat("2030-01-01T00:00:00+00:00")
    claim = "SELECT count(*) FROM codity.claim(%s, 'metered', %s, p_now => %s)"
    assert one(conn, claim, [worker, 3, window]) == 3
    assert one(conn, claim, [worker, 3, window + timedelta(seconds=30)]) == 1
    assert one(conn, claim, [worker, 3, window + timedelta(seconds=59)]) == 0
    assert one(conn, claim, [worker, 10, window + timedelta(seconds=60)]) == 4  # a new window
    create_queue(conn, "metered", rate_limit=0)
    assert one(conn, claim, [worker, 10, window + timedelta(seconds=61)]) == 10
    assert one(conn, "SELECT rate_period_seconds FROM codity.queues WHERE name = 'metered'") is None


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [("max_running", -1, "max_running must be from 1 to 100000"),
     ("rate_limit", 2_000_000, "rate_limit must be from 1 to 1000000"),
     ("rate_period_seconds", 0, "rate_period_seconds must be from 1 to 86400")],
)  # fmt: skip
def test_a_limit_out_of_range_is_refused(
    conn: Conn, setting: str, value: int, message: str
) -> None:
    create_queue(conn, "strict", max_running=2)
    with pytest.raises(psycopg.Error) as caught:
        create_queue(conn, "strict", **{setting: value})
    assert caught.value.sqlstate == "CD010" and message in str(caught.value)
    assert row(conn, "SELECT max_running, rate_limit FROM codity.queues WHERE name = 'strict'") == (
        2,
        None,
    )


def test_real_workers_never_run_more_than_the_limit_at_once(db_url: str, tmp_path: Path) -> None:
    """Four worker processes that each hold one job at most (concurrency 1, no prefetch) on
    a queue limited to 3: reaching the limit takes three of them at once. Sampled, the queue
    never has 4 jobs claimed or running; the handlers' own intervals never overlap 4 deep,
    and do reach 3 (the limit is used, not just respected, and across workers)."""
    limit, jobs = 3, 60
    with psycopg.connect(db_url, autocommit=True) as conn:
        create_queue(conn, "downstream", max_running=limit)
        _jobs(conn, "downstream", jobs, {"seconds": 0.05}, task="fault.timed")
        samples: list[int] = []
        with Processes(tmp_path, db_url) as procs:
            workers = [
                procs.worker("downstream", concurrency=1, name=f"w{n}", WORKER_PREFETCH="0")
                for n in range(4)
            ]

            def done() -> bool:
                samples.append(_running(conn, "downstream"))
                finished = one(conn, "SELECT count(*) FROM codity.jobs WHERE status = 'completed'")
                return bool(finished == jobs)

            wait_until(done, timeout=60, what="every job completed", interval=0.01, alive=workers)
        intervals = [
            (float(r[0]), float(r[1]))
            for r in conn.execute(
                "SELECT (result ->> 'began')::float8, (result ->> 'ended')::float8"
                " FROM codity.job_executions WHERE status = 'completed'"
            )
        ]
        workers_used = one(conn, "SELECT count(DISTINCT worker_id) FROM codity.job_executions")
    assert len(intervals) == jobs and len(samples) > 20
    assert max(samples) <= limit
    events = sorted(
        [(b, 1) for b, _ in intervals] + [(e, -1) for _, e in intervals],
        key=lambda ev: (ev[0], ev[1]),
    )  # an end before a start at the same instant
    depth = deepest = 0
    for _, step in events:
        depth += step
        deepest = max(deepest, depth)
    assert deepest == limit
    assert workers_used >= 3


def test_real_workers_keep_to_a_rate_limit(db_url: str, tmp_path: Path) -> None:
    """Three workers on a queue limited to 10 claims a second: no window of the database's
    clock holds more than 10 claims, and the workers keep claiming as windows open (the 40
    jobs take about four windows, not one poll interval each)."""
    rate, jobs = 10, 40
    with psycopg.connect(db_url, autocommit=True) as conn:
        create_queue(conn, "metered", rate_limit=rate, rate_period_seconds=1)
        _jobs(conn, "metered", jobs, {"seconds": 0}, task="fault.timed")
        with Processes(tmp_path, db_url, WORKER_POLL_INTERVAL_MS="30000") as procs:
            workers = [procs.worker("metered", concurrency=5, name=f"w{n}") for n in range(3)]
            wait_until(
                lambda: one(conn, "SELECT count(*) FROM codity.jobs WHERE status = 'completed'")
                == jobs,
                timeout=30, what="every job completed", alive=workers,
            )  # fmt: skip
        windows = Counter(
            r[0]
            for r in conn.execute(
                "SELECT date_bin('1 second', claimed_at, timestamptz 'epoch')"
                " FROM codity.job_executions"
            )
        )
        span = one(conn, "SELECT extract(epoch FROM max(claimed_at) - min(claimed_at))"
                         " FROM codity.job_executions")  # fmt: skip
    assert sum(windows.values()) == jobs
    assert max(windows.values()) <= rate
    assert len(windows) >= jobs // rate
    assert float(span) < 8  # the workers claimed again as each window opened


def test_the_api_and_the_dashboard_set_and_show_the_limits(db_url: str, conn: Conn) -> None:
    tenant = make_tenant(conn)
    admin = add_user(conn, tenant, Role.ADMIN)
    viewer = add_user(conn, tenant, Role.VIEWER)
    with web_client(db_url) as client:
        made = client.post("/api/v1/queues", headers=admin.headers,
                           json={"name": "api", "max_running": 4, "rate_limit": 50})  # fmt: skip
        assert made.status_code == 201, made.text
        data = made.json()["data"]
        assert (data["max_running"], data["rate_limit"], data["rate_period_seconds"]) == (4, 50, 1)
        cleared = client.patch("/api/v1/queues/api", headers=admin.headers,
                               json={"rate_limit": None})  # fmt: skip
        assert (cleared.json()["data"]["rate_limit"], cleared.json()["data"]["max_running"]) == (
            None, 4)  # fmt: skip
        bad = client.patch("/api/v1/queues/api", headers=admin.headers, json={"max_running": 0})
        assert bad.status_code == 422 and bad.json()["error"]["code"] == "validation_failed"

        session = sign_in(client, conn, admin)
        page = session.get("/queues/api")
        assert "At most running at once</dt><dd>4</dd>" in page.text
        form = {"max_running": "", "rate_limit": "7", "rate_period_seconds": "60"}
        assert session.post("/queues/api/limits", form).status_code == 303
        assert row(conn, "SELECT max_running, rate_limit, rate_period_seconds FROM codity.queues"
                         " WHERE name = 'api'") == (None, 7, 60)  # fmt: skip
        assert "7 per 1 min" in session.get("/queues/api").text
        for bad_form, message in (({"max_running": "many"}, "max_running must be a whole number"),
                                  ({"max_running": "0"}, "max_running")):  # fmt: skip
            refused = session.post("/queues/api/limits", {**form, **bad_form})
            assert refused.status_code == 422 and message in refused.text
        limits = "SELECT max_running, rate_limit FROM codity.queues WHERE name = 'api'"
        assert row(conn, limits) == (None, 7)

        watcher = sign_in(client, conn, viewer)
        assert 'action="/queues/api/limits"' not in watcher.get("/queues/api").text
        assert watcher.post("/queues/api/limits", {"max_running": "1"}).status_code == 403
    assert row(conn, "SELECT max_running FROM codity.queues WHERE name = 'api'") == (None,)
