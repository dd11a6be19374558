"""The failover rig's smoke test (``./test -m failover``): a pg_auto_failover cluster
(tests/autofailover.py) that Codity migrates through its multi-host URL, and a planned
switchover after which a new connection through the same URL lands on the new primary,
sees what was committed before and can write."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from codity.db import migrate
from codity.db.conninfo import conninfo
from tests.autofailover import AutoFailoverRig

pytestmark = pytest.mark.failover


@pytest.fixture
def rig() -> Iterator[AutoFailoverRig]:
    with AutoFailoverRig() as rig:
        yield rig


def _connect(url: str) -> psycopg.Connection[Any]:
    """As Codity's processes connect: target_session_attrs=read-write on a multi-host URL."""
    return psycopg.connect(conninfo(url), autocommit=True)


def test_migrate_enqueue_and_a_switchover_through_the_multi_host_url(
    rig: AutoFailoverRig,
) -> None:
    before = rig.primary()
    assert rig.secondary() != before
    migrate(rig.url)
    with _connect(rig.url) as conn:
        assert conn.info.port == rig.port(before), "the URL reaches the primary"
        conn.execute("SELECT * FROM codity.create_queue('smoke')")
        job = conn.execute("SELECT job_id FROM codity.enqueue('smoke', 'smoke.one')").fetchone()
        assert job is not None
        assert conn.execute("SHOW synchronous_standby_names").fetchone() != ("",), (
            "the secondary is in the write quorum: commits are synchronous"
        )

    _at, switching = rig.switchover()
    out = rig.finish_switchover(switching)
    rig.wait_healthy(timeout=60)
    after = rig.primary()
    assert after != before, f"{rig.describe()}\n{out}"
    assert rig.secondary() == before

    with _connect(rig.url) as conn:
        assert conn.info.port == rig.port(after), "a new connection finds the new primary"
        assert conn.execute("SELECT pg_is_in_recovery()").fetchone() == (False,)
        status = conn.execute(
            "SELECT job_status::text FROM codity.get_job(%s)", [job[0]]
        ).fetchone()
        assert status == ("queued",), "the job enqueued before the switchover is there"
        again = conn.execute("SELECT job_id FROM codity.enqueue('smoke', 'smoke.two')").fetchone()
        assert again is not None and again[0] > job[0]
    # The old primary is a standby now: read-only, and it has the new job too.
    with psycopg.connect(rig.node_url(before), autocommit=True) as standby:
        assert standby.execute("SELECT pg_is_in_recovery()").fetchone() == (True,)
        rig.wait(
            lambda: (
                standby.execute(
                    "SELECT count(*) FROM codity.jobs WHERE id = %s", [again[0]]
                ).fetchone()
                == (1,)
            ),
            timeout=10,
            what="the new job replicated to the old primary",
        )
