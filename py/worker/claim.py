"""The claim, seen from the worker: one statement, and the typed rows it returns.

``codity.claim`` then ``codity.start_many`` on what it claimed, in one statement: one round
trip and one commit (one WAL flush) between a wake-up and the handlers, and a start that
fails takes the claim back with it. start_many runs after the claim (its arguments are read
from it) and sees the claim's rows: a VOLATILE function takes a new snapshot per statement.
Rows come back as :class:`ClaimedJob` (psycopg's ``class_row``), not dicts.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

__all__ = ["CLAIM_AND_START", "ClaimedJob"]

CLAIM_AND_START = """
WITH claimed AS MATERIALIZED (
    SELECT * FROM codity.claim(%(worker)s, %(queue)s, %(limit)s, %(suspects)s)
             WITH ORDINALITY AS c
),
started AS MATERIALIZED (
    SELECT s.job_id, s.accepted
    FROM codity.start_many(ARRAY(SELECT c.job_id FROM claimed c ORDER BY c.ordinality),
                           ARRAY(SELECT c.fence FROM claimed c ORDER BY c.ordinality)) AS s
)
SELECT c.job_id, c.fence, c.task, c.payload, c.attempt, c.max_attempts, c.timeout_seconds,
       c.crashes, c.run_at, s.accepted
FROM claimed c JOIN started s ON s.job_id = c.job_id
ORDER BY c.ordinality
"""


@dataclass(frozen=True, slots=True)
class ClaimedJob:
    job_id: int
    fence: int
    task: str
    payload: Any
    attempt: int
    max_attempts: int
    timeout_seconds: int | None
    crashes: int
    """Leases of this job that expired before: a suspect of crashing its worker when > 0."""
    run_at: datetime
    accepted: bool
    """False when the job was taken back between the claim and the start (never, in practice)."""
