"""Bad input: every SQLSTATE the SQL API raises, with a precise message, and nothing written.

Each case calls one function the way a careless client would and checks four things: the
SQLSTATE, that the message names the thing that is wrong, that ``codity.db.translate`` maps
it to the right exception class, and that no table of schema codity changed (row counts and
contents, before and after). The cases share one database, set up once with a queue, workers
in every state, jobs, a replayed dead letter and a schedule; a case that wrote anything would
show in its own snapshot.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import TupleRow
from psycopg.types.json import Jsonb

from codity.db.errors import (
    SQLSTATES,
    CodityError,
    Conflict,
    IllegalTransition,
    InvalidInput,
    NotFound,
    NotPermitted,
    WorkerNotActive,
    translate,
)
from tests.conftest import cloned
from tests.sqlapi import one, row, table_snapshot

Conn = psycopg.Connection[TupleRow]


@dataclass(frozen=True)
class World:
    """Ids of what the shared database holds."""

    url: str
    worker: int
    stopped_worker: int
    dead_worker: int
    claimed_job: int
    claimed_fence: int
    completed_job: int
    replayed_dead_letter: int

    def params(self) -> dict[str, Any]:
        return {
            "worker": self.worker,
            "stopped_worker": self.stopped_worker,
            "dead_worker": self.dead_worker,
            "claimed_job": self.claimed_job,
            "claimed_fence": self.claimed_fence,
            "completed_job": self.completed_job,
            "replayed_dead_letter": self.replayed_dead_letter,
            "over_64kb": Jsonb("x" * 65535),
        }


def _build_world(conn: Conn, url: str) -> World:
    conn.execute("SELECT codity.create_queue('emails', p_max_attempts => 1)")
    conn.execute("SELECT codity.create_queue('reports')")
    worker = int(one(conn, "SELECT codity.register_worker('worker-ok', ARRAY['emails'])"))
    stopped = int(one(conn, "SELECT codity.register_worker('worker-stopped')"))
    conn.execute("SELECT codity.deregister_worker(%s)", [stopped])
    dead = int(
        one(
            conn, "SELECT codity.register_worker('worker-dead', p_now => now() - interval '1 hour')"
        )
    )
    conn.execute("SELECT codity.sweep_workers()")
    assert one(conn, "SELECT status::text FROM codity.workers WHERE id = %s", [dead]) == "dead"

    conn.execute(
        'SELECT codity.enqueue_many(\'emails\', \'[{"task": "a"}, {"task": "b"}, {"task": "c"}]\')'
    )
    done_job, done_fence = row(
        conn, "SELECT job_id, fence FROM codity.claim(%s, 'emails')", [worker]
    )
    conn.execute("SELECT codity.start(%s, %s)", [done_job, done_fence])
    conn.execute("SELECT codity.complete(%s, %s)", [done_job, done_fence])
    dead_job, dead_fence = row(
        conn, "SELECT job_id, fence FROM codity.claim(%s, 'emails')", [worker]
    )
    conn.execute("SELECT codity.start(%s, %s)", [dead_job, dead_fence])
    conn.execute("SELECT codity.fail(%s, %s, 'boom')", [dead_job, dead_fence])
    dead_letter = int(one(conn, "SELECT id FROM codity.dead_letters WHERE job_id = %s", [dead_job]))
    conn.execute("SELECT codity.replay_dead_letter(%s)", [dead_letter])
    claimed_job, claimed_fence = row(
        conn, "SELECT job_id, fence FROM codity.claim(%s, 'emails')", [worker]
    )
    conn.execute("SELECT codity.create_schedule('nightly', 'emails', '0 2 * * *', 'emails.digest')")
    return World(url, worker, stopped, dead, claimed_job, claimed_fence, done_job, dead_letter)


@pytest.fixture(scope="module")
def world(pg_server_url: str, template_url: str) -> Iterator[World]:
    with cloned(pg_server_url) as url, psycopg.connect(url, autocommit=True) as conn:
        yield _build_world(conn, url)


@pytest.fixture
def world_conn(world: World) -> Iterator[Conn]:
    with psycopg.connect(world.url, autocommit=True) as conn:
        yield conn


@dataclass(frozen=True)
class Case:
    id: str
    query: str
    sqlstate: str
    error_class: type[CodityError]
    # Substrings of the server's primary message: the thing it must name.
    names: tuple[str, ...]
    # The role the session SET ROLEs to for the call (None: the superuser that set it up).
    as_role: str | None = None


CASES = [
    # CD001 unknown queue
    Case(
        "enqueue-unknown-queue",
        "SELECT * FROM codity.enqueue('emials', 't')",
        "CD001",
        NotFound,
        ('queue "emials"',),
    ),
    Case(
        "claim-unknown-queue",
        "SELECT * FROM codity.claim(%(worker)s, 'emials')",
        "CD001",
        NotFound,
        ('"emials"',),
    ),
    Case(
        "register-worker-unknown-queue",
        "SELECT codity.register_worker('w', ARRAY['emails', 'reprots'])",
        "CD001",
        NotFound,
        ('queue "reprots"',),
    ),
    Case(
        "pause-unknown-queue",
        "SELECT codity.pause_queue('emials')",
        "CD001",
        NotFound,
        ('"emials"',),
    ),
    Case(
        "schedule-unknown-queue",
        "SELECT * FROM codity.create_schedule('s', 'emials', '* * * * *', 't')",
        "CD001",
        NotFound,
        ('"emials"',),
    ),
    # CD002 unknown project
    Case(
        "enqueue-unknown-project",
        "SELECT * FROM codity.enqueue('emails', 't', p_project_id => 987654)",
        "CD002",
        NotFound,
        ("project 987654",),
    ),
    Case(
        "create-queue-unknown-project",
        "SELECT * FROM codity.create_queue('q', 987654)",
        "CD002",
        NotFound,
        ("project 987654",),
    ),
    Case(
        "resume-all-unknown-project",
        "SELECT * FROM codity.resume_all(987654)",
        "CD002",
        NotFound,
        ("project 987654",),
    ),
    Case(
        "delete-unknown-project",
        "SELECT codity.delete_project(987654)",
        "CD002",
        NotFound,
        ("project 987654",),
    ),
    Case(
        "delete-the-default-project",
        "SELECT codity.delete_project((SELECT id FROM codity.projects WHERE is_default))",
        "CD021",
        Conflict,
        ("default project",),
    ),
    # The bodies that take the queue's id (DESIGN.md, "Room to scale out", rule 1)
    Case(
        "claim-in-unknown-queue-id",
        "SELECT * FROM codity.claim_in_queue(987654, %(worker)s)",
        "CD001",
        NotFound,
        ("queue 987654",),
    ),
    Case(
        "claim-in-null-queue-id",
        "SELECT * FROM codity.claim_in_queue(NULL, %(worker)s)",
        "CD010",
        InvalidInput,
        ("queue id must not be NULL",),
    ),
    Case(
        "enqueue-into-unknown-queue-id",
        'SELECT * FROM codity.enqueue_many_in_queue(987654, \'[{"task": "a"}]\')',
        "CD001",
        NotFound,
        ("queue 987654",),
    ),
    Case(
        "enqueue-one-into-unknown-queue-id",
        "SELECT * FROM codity.enqueue_in_queue(987654, 'a')",
        "CD001",
        NotFound,
        ("queue 987654",),
    ),
    Case(
        "reap-unknown-queue-id",
        "SELECT * FROM codity.reap_in_queue(987654)",
        "CD001",
        NotFound,
        ("queue 987654",),
    ),
    Case(
        "extend-leases-in-unknown-queue-id",
        "SELECT * FROM codity.extend_leases(987654, %(worker)s,"
        " ARRAY[%(claimed_job)s]::bigint[], ARRAY[%(claimed_fence)s])",
        "CD001",
        NotFound,
        ("queue 987654",),
    ),
    *(
        Case(
            f"{call}-in-another-queue",
            f"SELECT * FROM codity.{call}_in_queue("
            "(SELECT q.id FROM codity.queues q WHERE q.name = 'reports'), " + arguments + ")",
            "CD003",
            NotFound,
            ("job {claimed_job} does not exist in queue",),
        )
        for call, arguments in (
            ("start_many", "ARRAY[%(claimed_job)s]::bigint[], ARRAY[%(claimed_fence)s]"),
            ("complete_many", "ARRAY[%(claimed_job)s]::bigint[], ARRAY[%(claimed_fence)s]"),
            ("fail", "%(claimed_job)s, %(claimed_fence)s, 'boom'"),
            ("release", "%(claimed_job)s, %(claimed_fence)s"),
        )
    ),
    # CD003 unknown job
    Case(
        "start-unknown-job",
        "SELECT * FROM codity.start(987654, 1)",
        "CD003",
        NotFound,
        ("job 987654",),
    ),
    Case(
        "complete-unknown-job",
        "SELECT * FROM codity.complete(987654, 1)",
        "CD003",
        NotFound,
        ("job 987654",),
    ),
    Case(
        "fail-unknown-job",
        "SELECT * FROM codity.fail(987654, 1, 'x')",
        "CD003",
        NotFound,
        ("job 987654",),
    ),
    Case(
        "release-unknown-job",
        "SELECT * FROM codity.release(987654, 1)",
        "CD003",
        NotFound,
        ("job 987654",),
    ),
    Case(
        "cancel-unknown-job",
        "SELECT * FROM codity.cancel(987654)",
        "CD003",
        NotFound,
        ("job 987654",),
    ),
    # CD004 unknown worker
    Case(
        "claim-unknown-worker",
        "SELECT * FROM codity.claim(987654, 'emails')",
        "CD004",
        NotFound,
        ("worker 987654",),
    ),
    Case(
        "heartbeat-unknown-worker",
        "SELECT * FROM codity.heartbeat(987654)",
        "CD004",
        NotFound,
        ("worker 987654",),
    ),
    Case(
        "deregister-unknown-worker",
        "SELECT codity.deregister_worker(987654)",
        "CD004",
        NotFound,
        ("worker 987654",),
    ),
    # CD005 worker not active
    Case(
        "claim-by-deregistered-worker",
        "SELECT * FROM codity.claim(%(stopped_worker)s, 'emails')",
        "CD005",
        WorkerNotActive,
        ("worker {stopped_worker} is stopped",),
    ),
    Case(
        "claim-by-dead-worker",
        "SELECT * FROM codity.claim(%(dead_worker)s, 'emails')",
        "CD005",
        WorkerNotActive,
        ("worker {dead_worker} is dead",),
    ),
    Case(
        "heartbeat-by-deregistered-worker",
        "SELECT * FROM codity.heartbeat(%(stopped_worker)s)",
        "CD005",
        WorkerNotActive,
        ("worker {stopped_worker} has deregistered",),
    ),
    # CD006 unknown schedule
    Case(
        "pause-unknown-schedule",
        "SELECT codity.pause_schedule('nigthly')",
        "CD006",
        NotFound,
        ('schedule "nigthly"',),
    ),
    Case(
        "resume-unknown-schedule",
        "SELECT codity.resume_schedule('nigthly')",
        "CD006",
        NotFound,
        ('schedule "nigthly"',),
    ),
    # CD007 unknown dead letter
    Case(
        "replay-unknown-dead-letter",
        "SELECT * FROM codity.replay_dead_letter(987654)",
        "CD007",
        NotFound,
        ("dead letter 987654",),
    ),
    # CD008 unknown workflow or batch
    Case(
        "cancel-unknown-workflow",
        "SELECT * FROM codity.cancel_workflow(987654)",
        "CD008",
        NotFound,
        ("workflow 987654",),
    ),
    Case(
        "seal-unknown-batch",
        "SELECT * FROM codity.seal_batch(987654)",
        "CD008",
        NotFound,
        ("batch 987654",),
    ),
    # CD010 bad argument
    Case(
        "priority-above-range",
        "SELECT * FROM codity.enqueue('emails', 't', p_priority => 1001)",
        "CD010",
        InvalidInput,
        ("priority must be an integer from -1000 to 1000",),
    ),
    Case(
        "priority-below-range",
        "SELECT * FROM codity.enqueue('emails', 't', p_priority => -1001)",
        "CD010",
        InvalidInput,
        ("priority",),
    ),
    Case(
        "claim-limit-zero",
        "SELECT * FROM codity.claim(%(worker)s, 'emails', 0)",
        "CD010",
        InvalidInput,
        ("limit", "got 0"),
    ),
    Case(
        "claim-limit-1001",
        "SELECT * FROM codity.claim(%(worker)s, 'emails', 1001)",
        "CD010",
        InvalidInput,
        ("limit", "got 1001"),
    ),
    Case(
        "negative-base-delay",
        "SELECT * FROM codity.create_queue('q', p_base_delay_ms => -1)",
        "CD010",
        InvalidInput,
        ("base_delay_ms", "-1"),
    ),
    Case(
        "max-delay-below-base",
        "SELECT * FROM codity.create_queue('q', p_base_delay_ms => 100, p_max_delay_ms => 99)",
        "CD010",
        InvalidInput,
        ("max_delay_ms", "99"),
    ),
    Case(
        "negative-stale-after",
        "SELECT * FROM codity.sweep_workers(now(), interval '-5 seconds')",
        "CD010",
        InvalidInput,
        ("stale_after",),
    ),
    Case(
        "bad-backoff-name",
        "SELECT * FROM codity.create_queue('q', p_backoff => 'quadratic')",
        "CD010",
        InvalidInput,
        ("backoff", "'quadratic'"),
    ),
    Case(
        "bad-queue-name",
        "SELECT * FROM codity.create_queue('no spaces')",
        "CD010",
        InvalidInput,
        ("queue name", "'no spaces'"),
    ),
    Case(
        "unknown-key-in-job-object",
        "SELECT * FROM codity.enqueue_many('emails',"
        ' \'[{"task": "t"}, {"task": "t", "colour": "red"}]\')',
        "CD010",
        InvalidInput,
        ("job 2", "unknown key 'colour'"),
    ),
    Case(
        "jobs-not-an-array",
        "SELECT * FROM codity.enqueue_many('emails', '{\"task\": \"t\"}')",
        "CD010",
        InvalidInput,
        ("JSON array",),
    ),
    Case(
        "heartbeat-arrays-of-different-length",
        "SELECT * FROM codity.heartbeat("
        "%(worker)s, ARRAY[%(claimed_job)s, %(claimed_job)s]::bigint[], ARRAY[1])",
        "CD010",
        InvalidInput,
        ("differ in length (2 and 1)",),
    ),
    Case(
        "complete-without-fence",
        "SELECT * FROM codity.complete(%(claimed_job)s, NULL)",
        "CD010",
        InvalidInput,
        ("fence",),
    ),
    Case(
        "reap-limit-zero",
        "SELECT * FROM codity.reap(now(), 0)",
        "CD010",
        InvalidInput,
        ("limit", "got 0"),
    ),
    Case(
        "promote-limit-zero",
        "SELECT codity.promote(now(), 0)",
        "CD010",
        InvalidInput,
        ("limit", "got 0"),
    ),
    Case(
        "prune-limit-zero",
        "SELECT * FROM codity.prune(now(), 0)",
        "CD010",
        InvalidInput,
        ("p_limit", "got 0"),
    ),
    Case(
        "housekeeping-limit-zero",
        "SELECT * FROM codity.prune_housekeeping(now(), 0)",
        "CD010",
        InvalidInput,
        ("p_limit", "got 0"),
    ),
    Case(
        "housekeeping-keeps-workers-under-an-hour",
        "SELECT * FROM codity.prune_housekeeping(p_keep_workers => interval '59 minutes')",
        "CD010",
        InvalidInput,
        ("p_keep_workers", "at least 1 hour", "00:59:00"),
    ),
    Case(
        "housekeeping-negative-token-period",
        "SELECT * FROM codity.prune_housekeeping(p_keep_refresh_tokens => interval '-1 day')",
        "CD010",
        InvalidInput,
        ("p_keep_refresh_tokens", "0 or more", "-1 days"),
    ),
    Case(
        "housekeeping-negative-fence-rejection-period",
        "SELECT * FROM codity.prune_housekeeping(p_keep_fence_rejections => interval '-1 day')",
        "CD010",
        InvalidInput,
        ("p_keep_fence_rejections", "0 or more", "-1 days"),
    ),
    Case(
        "housekeeping-null-token-period",
        "SELECT * FROM codity.prune_housekeeping(p_keep_refresh_tokens => NULL)",
        "CD010",
        InvalidInput,
        ("p_keep_refresh_tokens", "got NULL"),
    ),
    Case(
        "queue-keep-completed-too-short",
        "SELECT * FROM codity.create_queue('q', p_keep_completed_seconds => 59)",
        "CD010",
        InvalidInput,
        ("keep_completed_seconds", "59"),
    ),
    Case(
        "queue-keep-dead-letters-negative",
        "SELECT * FROM codity.create_queue('q', p_keep_dead_letters_seconds => -1)",
        "CD010",
        InvalidInput,
        ("keep_dead_letters_seconds", "-1"),
    ),
    Case(
        "queue-max-running-negative",
        "SELECT * FROM codity.create_queue('q', p_max_running => -3)",
        "CD010",
        InvalidInput,
        ("max_running", "-3"),
    ),
    Case(
        "queue-rate-period-too-long",
        "SELECT * FROM codity.create_queue('q', p_rate_limit => 5, p_rate_period_seconds => 86401)",
        "CD010",
        InvalidInput,
        ("rate_period_seconds", "86401"),
    ),
    Case(
        "schedule-priority-out-of-range",
        "SELECT * FROM codity.create_schedule('s', 'emails', '* * * * *', 't', p_priority => 5000)",
        "CD010",
        InvalidInput,
        ("priority", "5000"),
    ),
    # CD011 payload over 64 KB
    Case(
        "payload-over-64kb",
        "SELECT * FROM codity.enqueue('emails', 't', %(over_64kb)s)",
        "CD011",
        InvalidInput,
        ("65537 bytes", "65536"),
    ),
    Case(
        "result-over-64kb",
        "SELECT * FROM codity.complete(%(claimed_job)s, %(claimed_fence)s, %(over_64kb)s)",
        "CD011",
        InvalidInput,
        ("result is 65537 bytes",),
    ),
    Case(
        "schedule-payload-over-64kb",
        "SELECT * FROM codity.create_schedule('s', 'emails', '* * * * *', 't', %(over_64kb)s)",
        "CD011",
        InvalidInput,
        ("65537 bytes",),
    ),
    # CD012 bad cron
    Case(
        "cron-with-words",
        "SELECT * FROM codity.create_schedule('s', 'emails', 'every minute', 't')",
        "CD012",
        InvalidInput,
        ("cron", "5 fields"),
    ),
    Case(
        "cron-minute-out-of-range",
        "SELECT * FROM codity.create_schedule('s', 'emails', '61 * * * *', 't')",
        "CD012",
        InvalidInput,
        ("minute", '"61"'),
    ),
    Case(
        "cron-with-seconds-field",
        "SELECT * FROM codity.create_schedule('s', 'emails', '* * * * * *', 't')",
        "CD012",
        InvalidInput,
        ("got 6",),
    ),
    Case(
        "cron-that-never-fires",
        "SELECT * FROM codity.create_schedule('s', 'emails', '0 0 30 2 *', 't')",
        "CD012",
        InvalidInput,
        ('"0 0 30 2 *"', "never fires"),
    ),
    # CD013 bad time zone
    Case(
        "unknown-time-zone",
        "SELECT * FROM codity.create_schedule("
        "'s', 'emails', '0 2 * * *', 't', '{}', 'Mars/Olympus_Mons')",
        "CD013",
        InvalidInput,
        ('"Mars/Olympus_Mons"',),
    ),
    Case(
        "abbreviation-is-not-a-time-zone",
        "SELECT * FROM codity.create_schedule('s', 'emails', '0 2 * * *', 't', '{}', 'PST')",
        "CD013",
        InvalidInput,
        ('"PST"',),
    ),
    # CD020 illegal transition
    Case(
        "complete-a-job-never-started",
        "SELECT * FROM codity.complete(%(claimed_job)s, %(claimed_fence)s)",
        "CD020",
        IllegalTransition,
        ("from claimed to completed",),
    ),
    Case(
        "fail-a-job-never-started",
        "SELECT * FROM codity.fail(%(claimed_job)s, %(claimed_fence)s, 'x')",
        "CD020",
        IllegalTransition,
        ("from claimed to failed",),
    ),
    Case(
        "cancel-a-completed-job",
        "SELECT * FROM codity.cancel(%(completed_job)s)",
        "CD020",
        IllegalTransition,
        ("from completed to cancelled",),
    ),
    # CD021 already done
    Case(
        "replay-twice",
        "SELECT * FROM codity.replay_dead_letter(%(replayed_dead_letter)s)",
        "CD021",
        Conflict,
        ("dead letter {replayed_dead_letter} was already replayed",),
    ),
    # CD022 not permitted
    Case(
        "heartbeat-from-the-future",
        "SELECT * FROM codity.heartbeat(%(worker)s, p_now => now() + interval '1 year')",
        "CD022",
        NotPermitted,
        ("only tests may move the clock", "codity_worker"),
        as_role="codity_worker",
    ),
    Case(
        "claim-from-a-queue-not-registered-for",
        "SELECT * FROM codity.claim(%(worker)s, 'reports')",
        "CD023",
        NotPermitted,
        ('worker {worker} may not claim from queue "reports"',),
    ),
]


def test_every_sqlstate_of_the_api_has_a_case() -> None:
    assert {case.sqlstate for case in CASES} == set(SQLSTATES)
    assert len({case.id for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_input_raises_its_sqlstate_names_the_problem_and_writes_nothing(
    world: World, world_conn: Conn, case: Case
) -> None:
    before = table_snapshot(world_conn)
    if case.as_role:
        world_conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(case.as_role)))
    try:
        with pytest.raises(psycopg.Error) as caught:
            world_conn.execute(case.query, world.params())
    finally:
        world_conn.execute("RESET ROLE")
    exc = caught.value

    assert exc.sqlstate == case.sqlstate, exc.diag.message_primary
    message = exc.diag.message_primary or ""
    for name in case.names:
        expected = name.format(**world.params())
        assert expected in message, f"{message!r} does not name {expected!r}"

    translated = translate(exc)
    assert translated is not None
    assert type(translated) is case.error_class
    assert translated.sqlstate == case.sqlstate
    assert translated.message == message
    assert translated.detail == exc.diag.message_detail
    assert translated.hint == exc.diag.message_hint

    assert table_snapshot(world_conn) == before


def test_errors_outside_the_api_are_not_translated(world_conn: Conn) -> None:
    with pytest.raises(psycopg.Error) as caught:
        world_conn.execute("SELECT 1 / 0")
    assert translate(caught.value) is None


def test_payload_of_exactly_64_kb_is_accepted(tx: Conn) -> None:
    tx.execute("SELECT codity.create_queue('emails')")
    payload = Jsonb("x" * 65534)
    size = one(tx, "SELECT octet_length(%s::jsonb::text)", [payload])
    assert size == 65536
    job_id = one(tx, "SELECT job_id FROM codity.enqueue('emails', 't', %s)", [payload])
    assert (
        one(tx, "SELECT octet_length(payload::text) FROM codity.jobs WHERE id = %s", [job_id])
        == 65536
    )
