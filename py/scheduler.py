"""``codity scheduler``: call ``codity.tick()`` every SCHEDULER_TICK_MS, then ``codity.prune()``,
and ``codity.prune_housekeeping()`` once a minute.

All the logic is in the database; this loop only keeps time. Any number of replicas may
run (every step of tick and prune is SKIP LOCKED), so there is no leader to elect. pg_cron
can replace this process entirely (docs/RUNBOOK.md).

Pruning (retention, docs/DESIGN_DECISIONS.md 53) runs after each tick in calls of at most
PRUNE_LIMIT jobs per queue, each its own short transaction, again while a call still
deletes something and until half the tick's interval is spent: a backlog of aged-out jobs
is worked off over several ticks instead of in one long transaction. Housekeeping (old
stopped workers and expired refresh tokens, DESIGN_DECISIONS 57) runs at
the first tick and then once every HOUSEKEEPING_EVERY_S, in the same way.
"""

from __future__ import annotations

import logging
import threading
import time

import psycopg

from codity import health_file
from codity.backoff import Backoff, server_address
from codity.db.conninfo import conninfo
from codity.db.errors import TRANSIENT
from codity.outage import Outage
from codity.stop_signal import StopSignal

__all__ = ["HOUSEKEEPING_EVERY_S", "PRUNE_LIMIT", "housekeep", "prune", "run_scheduler"]

log = logging.getLogger(__name__)

PRUNE_LIMIT = 1000
HOUSEKEEPING_EVERY_S = 60.0


def prune(conn: psycopg.Connection, budget_s: float) -> tuple[int, ...]:
    """Call ``codity.prune`` until it finds nothing or ``budget_s`` is spent; the totals
    deleted (jobs, executions, dead letters)."""
    return _until_done(conn, "SELECT * FROM codity.prune(p_limit => %s)", budget_s)


def housekeep(conn: psycopg.Connection, budget_s: float) -> tuple[int, ...]:
    """The same with ``codity.prune_housekeeping``: workers long gone, refresh tokens long
    expired, fence rejections past their period (counted into their totals)."""
    return _until_done(conn, "SELECT * FROM codity.prune_housekeeping(p_limit => %s)", budget_s)


def _until_done(conn: psycopg.Connection, call: str, budget_s: float) -> tuple[int, ...]:
    """Run ``call`` (PRUNE_LIMIT rows at most per kind, each call its own transaction)
    again while it deletes something and ``budget_s`` lasts; the totals per kind."""
    deadline = time.monotonic() + budget_s
    totals: tuple[int, ...] = ()
    while True:
        row = conn.execute(call, [PRUNE_LIMIT]).fetchone()
        assert row is not None
        totals = tuple(t + int(n) for t, n in zip(totals or (0,) * len(row), row, strict=True))
        if not any(row) or time.monotonic() >= deadline:
            return totals


TICK = "SELECT * FROM codity.tick()"
TICK_IN_GRACE = """
SELECT 0 AS workers_dead, 0 AS reaped, 0 AS dead_lettered, p.promoted, m.materialized
FROM (SELECT codity.promote() AS promoted) AS p,
     (SELECT count(*)::integer AS materialized FROM codity.materialize_cron()) AS m,
     (SELECT codity.roll_up()) AS r
"""
"""The tick without its worker sweep and its reaping: what the scheduler runs for a while
after it reconnects (``_outage_grace``)."""


def _outage_grace(conn: psycopg.Connection) -> float:
    """Seconds during which, back from a lost connection, the scheduler neither declares
    workers dead nor reaps leases: the installation's ``worker_dead_after``.

    While the database was away (a failover, a restart) no worker could heartbeat, so
    leases ran out and heartbeats went stale on the database's clock although the workers
    and their handlers lived on. Reaped at the first tick, their jobs ran a second time
    and were charged a crash (18-32 jobs per failover, from outside, issue 25). In the
    grace every live worker heartbeats (it retries at once when it failed, and renews a
    lease that ran out but was not reaped); whatever is still expired after it belongs to
    a worker that is really gone, reaped one grace later than otherwise."""
    row = conn.execute(
        "SELECT extract(epoch FROM s.worker_dead_after)::float8 FROM codity.settings s"
    ).fetchone()
    grace = float(row[0]) if row else 15.0
    log.info("reconnected: no worker sweep and no reaping for %.0f s, so that workers that"
             " lived through the outage heartbeat first", grace)  # fmt: skip
    return grace


def run_scheduler(url: str, tick_ms: int, stop: threading.Event | StopSignal) -> None:
    """Tick until ``stop`` is set; reconnect with capped backoff when the database goes away."""
    backoff = Backoff()
    server = server_address(url)
    next_housekeeping = 0.0
    lost = False  # the last connection (or attempt) failed: this one ends an outage
    outage = Outage(log)
    grace_until = 0.0
    while not stop.is_set():
        try:
            info = conninfo(url, application_name="codity-scheduler")
            with psycopg.connect(info, autocommit=True) as conn:
                backoff.reset()
                if lost:
                    grace_until = time.monotonic() + _outage_grace(conn)
                    lost = False
                while not stop.is_set():
                    started = time.monotonic()
                    tick = TICK if started >= grace_until else TICK_IN_GRACE
                    row = conn.execute(tick).fetchone()
                    outage.answered()
                    if row and any(row):
                        log.info(
                            "tick: %d dead workers, %d reaped, %d dead-lettered, "
                            "%d promoted, %d cron jobs",
                            *row,
                        )
                    health_file.touch()
                    budget = max(0.0, tick_ms / 2000 - (time.monotonic() - started))
                    pruned = prune(conn, budget)
                    if any(pruned):
                        log.info("pruned %d jobs, %d executions, %d dead letters", *pruned)
                    if started >= next_housekeeping:
                        next_housekeeping = started + HOUSEKEEPING_EVERY_S
                        budget = max(0.0, tick_ms / 2000 - (time.monotonic() - started))
                        gone = housekeep(conn, budget)
                        if any(gone):
                            log.info(
                                "pruned %d old workers, %d refresh tokens, %d fence rejections",
                                *gone,
                            )
                    elapsed = time.monotonic() - started
                    stop.wait(max(0.0, tick_ms / 1000 - elapsed))
        except TRANSIENT as exc:
            lost = True
            # The connection is closed on the way out, so a read-only one (25006) is
            # replaced too: with a multi-host URL the next one lands on the primary.
            outage.failed("tick", exc)
            backoff.wait_blocking(stop, server=server)
