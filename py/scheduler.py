"""``codity scheduler``: call ``codity.tick()`` every SCHEDULER_TICK_MS.

All the logic is in the database; this loop only keeps time. Any number of replicas may
run (every step of tick is SKIP LOCKED), so there is no leader to elect. pg_cron can
replace this process entirely (docs/RUNBOOK.md).
"""

from __future__ import annotations

import logging
import threading
import time

import psycopg

from codity.backoff import Backoff, server_address
from codity.stop_signal import StopSignal

__all__ = ["run_scheduler"]

log = logging.getLogger(__name__)


def run_scheduler(url: str, tick_ms: int, stop: threading.Event | StopSignal) -> None:
    """Tick until ``stop`` is set; reconnect with capped backoff when the database goes away."""
    backoff = Backoff()
    server = server_address(url)
    while not stop.is_set():
        try:
            with psycopg.connect(url, autocommit=True, application_name="codity-scheduler") as conn:
                backoff.reset()
                while not stop.is_set():
                    started = time.monotonic()
                    row = conn.execute("SELECT * FROM codity.tick()").fetchone()
                    if row and any(row):
                        log.info(
                            "tick: %d dead workers, %d reaped, %d dead-lettered, "
                            "%d promoted, %d cron jobs",
                            *row,
                        )
                    elapsed = time.monotonic() - started
                    stop.wait(max(0.0, tick_ms / 1000 - elapsed))
        except psycopg.OperationalError as exc:
            log.warning("database unavailable (%s); retrying", type(exc).__name__)
            backoff.wait_blocking(stop, server=server)
