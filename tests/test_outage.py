"""codity.outage: one warning when the database stops answering, one when it is back.

Every loop of a worker (claim, heartbeat, reports, listener) and the scheduler's tick
report their failures to one Outage; what an operator reads during a failover is two lines
per process, not one per retry (HA.md §7). The worker's own use is checked end to end in
tests/test_worker_partition.py.
"""

from __future__ import annotations

import logging

import psycopg
import pytest

from codity.outage import Outage


def test_one_warning_per_outage_from_every_loop_and_one_when_it_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = logging.getLogger("codity.test_outage")
    caplog.set_level(logging.DEBUG, logger="codity.test_outage")
    outage = Outage(log)
    outage.answered()  # nothing was away: nothing said
    lost = psycopg.OperationalError("server closed the connection unexpectedly")
    for doing in ("claim", "heartbeat", "claim", "reporting 3 completion(s)"):
        outage.failed(doing, lost)
    assert outage.ongoing
    outage.answered()
    outage.answered()
    records = [(r.levelno, r.getMessage()) for r in caplog.records]
    warnings = [m for level, m in records if level == logging.WARNING]
    assert warnings[0] == (
        "claim failed (OperationalError: server closed the connection unexpectedly);"
        " retrying until the database answers"
    )
    assert len(warnings) == 2 and warnings[1].startswith("the database answers again after ")
    assert warnings[1].endswith("(4 call(s) failed meanwhile)")
    debug = [m for level, m in records if level == logging.DEBUG]
    assert debug[0].startswith("heartbeat failed again (OperationalError") and len(debug) == 3
    # The next outage is announced again.
    outage.failed("tick", lost)
    assert caplog.records[-1].getMessage().startswith("tick failed (")
