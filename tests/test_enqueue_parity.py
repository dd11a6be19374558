"""One job, two bodies: codity.enqueue and codity.enqueue_many must agree.

A single job goes through codity._enqueue_one (typed arguments; what enqueue and
enqueue_in_queue call), a batch through codity.enqueue_many_in_queue (a JSON array); the
single body exists because it costs about a quarter less server time per call
(sql/functions/enqueue.sql). Both check ranges with
codity._job_fields_problem, but each writes its own INSERT, so here the same job, good or bad,
goes through both, into two queues configured alike, at the same p_now: the answers (status,
run_at, is_new), the errors (SQLSTATE and message) and the rows written must be the same.
Hypothesis draws the jobs around every boundary the rules have; a second call with the same
idempotency key must find the first job in both.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.rows import TupleRow
from psycopg.types.json import Jsonb

from tests.conftest import cloned

Conn = psycopg.Connection[TupleRow]

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)

# What a stored job holds that the enqueue decided (ids and queue differ by design).
_ROW = """
SELECT j.task, j.payload, j.priority, j.status, j.run_at, j.max_attempts, j.idempotency_key,
       j.attempt, j.execution_seq, j.crash_count, j.created_at, j.updated_at, j.finished_at
FROM codity.jobs j WHERE j.id = %s
"""

_SINGLE = """
SELECT job_id, job_status, run_at, is_new FROM codity.enqueue(
    'one', %(task)s, %(payload)s, %(run_at)s, %(priority)s, %(key)s, %(max_attempts)s,
    p_now => %(now)s)
"""
_BATCH = """
SELECT job_id, job_status, run_at, is_new
FROM codity.enqueue_many('many', %(jobs)s, p_now => %(now)s)
"""


@pytest.fixture(scope="module")
def parity_conn(pg_server_url: str, template_url: str) -> Iterator[Conn]:
    with cloned(pg_server_url) as url, psycopg.connect(url, autocommit=True) as conn:
        for name in ("one", "many"):
            conn.execute("SELECT codity.create_queue(%s, p_max_attempts => 7)", [name])
        yield conn


def _spec(job: dict[str, Any]) -> dict[str, Any]:
    """The JSON object enqueue_many takes for the same job: absent fields left out."""
    spec: dict[str, Any] = {}
    for key in ("task", "payload", "priority", "idempotency_key", "max_attempts"):
        if job[key] is not None:
            spec[key] = job[key]
    if job["run_at"] is not None:
        spec["run_at"] = job["run_at"].isoformat()
    return spec


def _call(conn: Conn, query: str, params: dict[str, Any]) -> tuple[str, Any]:
    try:
        return "ok", conn.execute(query, params).fetchone()
    except psycopg.Error as error:
        diag = error.diag
        return "error", (diag.sqlstate, diag.message_primary)


def _both(conn: Conn, job: dict[str, Any]) -> tuple[tuple[str, Any], tuple[str, Any]]:
    single = _call(
        conn,
        _SINGLE,
        {
            "task": job["task"],
            "payload": None if job["payload"] is None else Jsonb(job["payload"]),
            "run_at": job["run_at"],
            "priority": job["priority"],
            "key": job["idempotency_key"],
            "max_attempts": job["max_attempts"],
            "now": T0,
        },
    )
    batch = _call(conn, _BATCH, {"jobs": Jsonb([_spec(job)]), "now": T0})
    return single, batch


def _assert_agree(conn: Conn, job: dict[str, Any]) -> tuple[Any, Any]:
    single, batch = _both(conn, job)
    assert single[0] == batch[0], (job, single, batch)
    if single[0] == "error":
        assert single[1] == batch[1], job
        return None, None
    (s_id, *s_answer), (b_id, *b_answer) = single[1], batch[1]
    assert s_answer == b_answer, job
    s_row = conn.execute(_ROW, [s_id]).fetchone()
    b_row = conn.execute(_ROW, [b_id]).fetchone()
    assert s_row is not None and s_row == b_row, job
    return s_id, b_id


# PostgreSQL's text holds no NUL character, and a client cannot even send one.
_chars = st.characters(exclude_characters="\x00", exclude_categories=["Cs"])
_texts = st.one_of(
    st.none(),
    st.text(_chars, min_size=0, max_size=3),
    st.sampled_from([199, 200, 201]).map(lambda n: "k" * n),
)
_jobs = st.fixed_dictionaries(
    {
        "task": st.one_of(_texts, st.text(_chars, min_size=1, max_size=20)),
        "payload": st.one_of(
            st.none(),
            st.dictionaries(
                st.text(_chars, max_size=5), st.integers() | st.text(_chars, max_size=5), max_size=3
            ),
            st.sampled_from([65_536 - 12, 65_536 - 11, 65_536 - 10]).map(lambda n: {"s": "x" * n}),
        ),
        "priority": st.one_of(
            st.none(),
            st.integers(-1_001, 1_001),
            st.sampled_from([-1_000, 1_000, -(2**31), 2**31 - 1]),
        ),
        "max_attempts": st.one_of(st.none(), st.integers(-1, 1_001)),
        "idempotency_key": _texts,
        "run_at": st.one_of(
            st.none(), st.sampled_from([T0, T0 - timedelta(days=1), T0 + timedelta(seconds=1)])
        ),
    }
)


@given(job=_jobs)
@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_the_same_job_gets_the_same_answer_error_and_row_from_both_bodies(
    parity_conn: Conn, job: dict[str, Any]
) -> None:
    _assert_agree(parity_conn, job)


def test_the_payload_limit_falls_on_the_same_byte_in_both(parity_conn: Conn) -> None:
    """The boundary the drawn jobs straddle, named: {"s": "x…"} serializes to 9 bytes more
    than its string, so 65,527 x's is the largest payload allowed."""
    for size, allowed in ((65_527, True), (65_528, False)):
        job = {
            "task": "t",
            "payload": {"s": "x" * size},
            "priority": None,
            "max_attempts": None,
            "idempotency_key": None,
            "run_at": None,
        }
        assert len(json.dumps(job["payload"], separators=(", ", ": "))) == size + 9
        single, batch = _both(parity_conn, job)
        assert (single[0] == "ok") is allowed and (batch[0] == "ok") is allowed, size
        if not allowed:
            assert (
                single[1]
                == batch[1]
                == ("CD011", f"payload is {size + 9} bytes; the limit is 65536")
            )


def test_a_repeated_idempotency_key_finds_the_first_job_in_both(parity_conn: Conn) -> None:
    job = {
        "task": "t",
        "payload": {"n": 1},
        "priority": 3,
        "max_attempts": None,
        "idempotency_key": "parity-repeat",
        "run_at": T0 + timedelta(hours=1),
    }
    first_single, first_batch = _assert_agree(parity_conn, job)
    again = dict(job, task="other", priority=9, run_at=None)
    single, batch = _both(parity_conn, again)
    assert single == ("ok", (first_single, "scheduled", T0 + timedelta(hours=1), False))
    assert batch == ("ok", (first_batch, "scheduled", T0 + timedelta(hours=1), False))
