"""``codity queue NAME``: create a queue or change its settings from the command line.

The same call as the API's ``PATCH /api/v1/queues/{name}`` and the dashboard's queue page
make, codity.create_queue, with the settings given and every other one kept; ``--pause``
and ``--resume`` call codity.pause_queue and codity.resume_queue. Prints the queue's
settings as they are afterwards, so that ``codity queue emails`` alone shows them (and
creates the queue, with the defaults, when there is none). A refusal of the database (a
weight of 0, say) is one line and exit 2, and writes nothing: the calls run in one
transaction.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row

from codity.db.conninfo import conninfo
from codity.db.errors import translate

__all__ = ["POLICY", "render_queue", "set_queue"]

POLICY = {
    "weight": "its share of a worker's room beside the other queues with work (1 to 1000)",
    "max_running": "at most this many of its jobs claimed or running at once (0 removes it)",
    "rate_limit": "at most this many claims per rate period (0 removes it)",
    "rate_period_seconds": "the rate limit's period in seconds (1 by default)",
    "lease_seconds": "how long a claim lasts without a heartbeat",
    "max_attempts": "attempts before a job is dead-lettered",
    "job_timeout_seconds": "how long a handler may run (0 removes it)",
}
"""The settings ``codity queue`` changes: codity.create_queue's arguments, without p_."""

_READ = """
SELECT q.id, q.project_id, q.name, q.is_paused, q.weight, q.max_running, q.rate_limit,
       q.rate_period_seconds, q.lease_seconds, q.max_attempts, q.job_timeout_seconds
FROM codity.queues q WHERE q.id = %s
"""


def set_queue(
    url: str, name: str, project: str | None, policy: dict[str, int], pause: bool | None
) -> dict[str, Any]:
    """Create or change the queue, pause or resume it, and return its settings and whether
    it was created; raises CodityError when the database refuses (nothing is written)."""
    args = "".join(f", p_{key} => %s" for key in policy)
    try:
        with psycopg.connect(conninfo(url), row_factory=dict_row) as conn, conn.transaction():
            project_id = conn.execute("SELECT codity.find_project(%s) AS id", [project]).fetchone()
            assert project_id is not None
            made = conn.execute(
                f"SELECT queue_id, created FROM codity.create_queue(%s, p_project_id => %s{args})",
                [name, project_id["id"], *policy.values()],
            ).fetchone()
            assert made is not None
            if pause is not None:
                verb = "pause_queue" if pause else "resume_queue"
                conn.execute(f"SELECT codity.{verb}(%s, %s)", [name, project_id["id"]])
            queue = conn.execute(_READ, [made["queue_id"]]).fetchone()
            assert queue is not None
    except psycopg.Error as exc:
        translated = translate(exc)
        if translated is not None:
            raise translated from exc
        raise
    return {**queue, "created": made["created"]}


def render_queue(queue: dict[str, Any]) -> str:
    def unset(value: Any, unit: str = "") -> str:
        return "none" if value is None else f"{value}{unit}"

    rate = "none"
    if queue["rate_limit"] is not None:
        rate = f"{queue['rate_limit']} per {queue['rate_period_seconds']}s"
    what = "created" if queue["created"] else "settings"
    return "\n".join(
        [
            f"queue {queue['name']} (id {queue['id']}, project {queue['project_id']}): {what}",
            f"  state         {'paused' if queue['is_paused'] else 'active'}",
            f"  weight        {queue['weight']}",
            f"  max running   {unset(queue['max_running'])}",
            f"  rate limit    {rate}",
            f"  lease         {queue['lease_seconds']}s",
            f"  max attempts  {queue['max_attempts']}",
            f"  job timeout   {unset(queue['job_timeout_seconds'], 's')}",
        ]
    )
