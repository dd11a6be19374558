"""The claim, seen from the worker: one call, and the typed rows it returns.

``codity.claim_in_queue(queue_id, worker, ..., p_start => true)``, by the queue's id
(DESIGN.md, "Room to scale out", rule 1): the jobs come back already running, in one round
trip, one commit (one WAL flush) and one write per job row between a wake-up and the
handlers (migration 0012; a claim followed by ``codity.start_many`` wrote every job row
and execution row twice). Rows come back as :class:`ClaimedJob` (psycopg's ``args_row``:
the values in column order, no dict per row), with only the columns the worker uses.
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["CLAIM_AND_START", "ClaimedJob"]

CLAIM_AND_START = """
SELECT c.job_id, c.fence, c.task, c.payload, c.attempt, c.max_attempts, c.timeout_seconds,
       c.crashes
FROM codity.claim_in_queue(%(queue_id)s, %(worker)s, %(limit)s, %(suspects)s,
                           p_start => true) AS c
"""


class ClaimedJob(NamedTuple):
    """One claimed job, its fields in CLAIM_AND_START's column order. A named tuple: made
    once per claimed job, and a frozen dataclass's ``__init__`` (one ``object.__setattr__``
    per field) after psycopg's ``class_row`` (a dict per row) was a tenth of the worker's
    samples in a drain (py-spy)."""

    job_id: int
    fence: int
    task: str
    payload: Any
    attempt: int
    max_attempts: int
    timeout_seconds: int | None
    crashes: int
    """Leases of this job that expired before: a suspect of crashing its worker when > 0."""
