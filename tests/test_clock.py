"""Nobody but a test moves the clock: p_now is honoured for superusers and codity_clock only.

Every public function takes ``p_now`` so tests can move time instead of sleeping. For any
other caller it must not move anything: a worker that heartbeats "a year from now" would
keep its leases beyond the reach of sweep and reap. As real logins holding each production
role, every function the role may call that takes ``p_now`` is called with the clock moved a
year forward and a year back (CD022, nothing written), then normally, so the scenario goes
on and each call meets real state (tests/sql_scenarios.py).
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests import sql_scenarios
from tests.logins import login_role

ROLES = ("codity_worker", "codity_app", "codity_readonly")
SHIFTS = ("now() + interval '1 year'", "now() - interval '1 year'")


def _functions_taking_now(conn: psycopg.Connection[Any], role: str) -> set[str]:
    return {
        str(r[0])
        for r in conn.execute(
            "SELECT p.proname FROM pg_catalog.pg_proc p"
            " WHERE p.pronamespace = 'codity'::regnamespace"
            "   AND 'p_now' = ANY (p.proargnames)"
            "   AND pg_catalog.has_function_privilege(%s, p.oid, 'EXECUTE')",
            [role],
        )
    }


def play_with_moved_clock(
    conn: psycopg.Connection[Any], role: str, world: dict[str, Any]
) -> dict[str, str]:
    """Each call that takes p_now, tried with the clock moved (rolled back), then made
    normally; returns {function: SQLSTATE of the moved attempt, or 'accepted'}."""
    outcomes: dict[str, str] = {}
    env = dict(world)
    for call in sql_scenarios.SCENARIOS[role]:
        if call.takes_now:
            for shift in SHIFTS:
                conn.execute("SAVEPOINT moved")
                try:
                    conn.execute(sql_scenarios.render(call, shift).encode(), call.params(env))
                    outcome = "accepted"
                except psycopg.Error as exc:
                    outcome = exc.sqlstate or type(exc).__name__
                conn.execute("ROLLBACK TO SAVEPOINT moved")
                previous = outcomes.setdefault(call.function, outcome)
                if previous != outcome:
                    outcomes[call.function] = f"{previous} / {outcome}"
        cur = conn.cursor(row_factory=psycopg.rows.dict_row)
        cur.execute(sql_scenarios.render(call).encode(), call.params(env))
        rows = cur.fetchall()
        if call.save:
            env[call.save] = rows
    return outcomes


def test_every_function_that_takes_p_now_is_tried_with_a_moved_clock(
    tx: psycopg.Connection[Any],
) -> None:
    for role in ROLES:
        tried = {c.function for c in sql_scenarios.SCENARIOS[role] if c.takes_now}
        assert _functions_taking_now(tx, role) - tried == set(), role


@pytest.mark.parametrize("role", ROLES)
def test_no_production_role_can_move_the_clock(db_url: str, role: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as admin:
        world = sql_scenarios.set_up(admin)
        expected = _functions_taking_now(admin, role)
    with login_role(db_url, role) as url, psycopg.connect(url) as caller:
        outcomes = play_with_moved_clock(caller, role, world)
        caller.rollback()
    assert set(outcomes) == expected
    assert outcomes == dict.fromkeys(expected, "CD022")


def test_set_role_is_the_caller_too(tx: psycopg.Connection[Any]) -> None:
    """A superuser session that SET ROLE codity_worker is a worker for the check."""
    tx.execute("SELECT codity.create_queue('emails')")
    tx.execute("SET ROLE codity_worker")
    with (
        pytest.raises(psycopg.Error, match="only tests may move the clock") as refused,
        tx.transaction(),
    ):
        tx.execute(
            "SELECT codity.register_worker('w', ARRAY['emails'], p_now => now() + interval '1 day')"
        )
    assert refused.value.sqlstate == "CD022"
    tx.execute("RESET ROLE")
    (worker,) = tx.execute(
        "SELECT codity.register_worker('w', ARRAY['emails'], p_now => now() + interval '1 day')"
    ).fetchone() or (None,)
    assert worker is not None, "a superuser moves the clock (tests do)"


def test_a_worker_cannot_stretch_its_lease_with_a_heartbeat_from_the_future(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as admin:
        admin.execute("SELECT codity.create_queue('emails', p_lease_seconds => 30)")
        admin.execute("SELECT codity.enqueue('emails', 'emails.send')")
    with login_role(db_url, "codity_worker") as url, psycopg.connect(url, autocommit=True) as w:
        (worker,) = w.execute("SELECT codity.register_worker('w', ARRAY['emails'])").fetchone() or (
            0,
        )
        job, fence, lease = w.execute(
            "SELECT job_id, fence, lease_expires_at FROM codity.claim(%s, 'emails', 1)", [worker]
        ).fetchone() or (0, 0, None)
        with pytest.raises(psycopg.Error) as refused:
            w.execute(
                "SELECT * FROM codity.heartbeat(%s, ARRAY[%s]::bigint[], ARRAY[%s],"
                " p_now => now() + interval '1 year')",
                [worker, job, fence],
            )
        assert refused.value.sqlstate == "CD022"
    with psycopg.connect(db_url, autocommit=True) as admin:
        row = admin.execute(
            "SELECT j.lock_expires_at, w.last_heartbeat_at < now() + interval '1 minute'"
            " FROM codity.jobs j, codity.workers w WHERE j.id = %s AND w.id = %s",
            [job, worker],
        ).fetchone()
        assert row == (lease, True), "neither the lease nor the heartbeat moved"
        # ... and the reaper still recovers the job once its real lease has passed.
        reaped = admin.execute(
            "SELECT outcome FROM codity.reap(p_now => now() + interval '31 seconds')"
        ).fetchall()
        assert reaped == [("requeued",)]


def test_a_member_of_codity_clock_may_move_it(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as admin:
        admin.execute("SELECT codity.create_queue('emails')")
    with login_role(db_url, "codity_clock") as url, psycopg.connect(url, autocommit=True) as c:
        # codity_clock grants no EXECUTE by itself; the login needs the worker role as well.
        with psycopg.connect(db_url, autocommit=True) as admin:
            user = c.execute("SELECT current_user").fetchone()
            assert user is not None
            admin.execute(f'GRANT codity_worker TO "{user[0]}"')
        row = c.execute(
            "SELECT * FROM codity.enqueue('emails', 't', p_now => '2030-01-01 00:00Z')"
        ).fetchone()
        assert row is not None and row[2].year == 2030
