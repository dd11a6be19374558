"""A job's history as the job detail answers it: its dead letters, the stale calls its
fences refused, and one timeline that puts every step in time order.

The timeline is built from rows the job route has already read (the job, its executions,
its dead letters), so it costs no query of its own and can never disagree with them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel

__all__ = ["DeadLetterRecord", "FenceRejection", "TimelineEvent", "timeline"]


class DeadLetterRecord(BaseModel):
    id: int
    reason: str
    error: str | None
    attempts: int
    dead_at: dt.datetime
    replayed_at: dt.datetime | None
    replayed_job_id: int | None


class FenceRejection(BaseModel):
    id: int
    call: str
    """The function that presented the stale fence (complete, fail, heartbeat, ...)."""
    worker_id: int | None
    presented_fence: int
    current_fence: int | None
    job_status: str | None
    rejected_at: dt.datetime


class TimelineEvent(BaseModel):
    at: dt.datetime
    event: str
    """created, due, claimed, started, completed, failed, reaped, released, cancelled,
    dead_lettered, replayed."""
    attempt: int | None = None
    worker_id: int | None = None
    detail: str | None = None


# What an execution's final status says happened to the attempt.
_ENDINGS = {
    "completed": "completed",
    "failed": "failed",
    "reaped": "reaped",
    "released": "released",
    "cancelled": "cancelled",
}


def _event(
    at: dt.datetime | None, event: str, detail: str | None = None, **more: Any
) -> list[dict[str, Any]]:
    return [] if at is None else [{"at": at, "event": event, "detail": detail, **more}]


def _attempt_events(x: Mapping[str, Any]) -> list[dict[str, Any]]:
    who = {"attempt": x["attempt"], "worker_id": x["worker_id"]}
    events = _event(x["claimed_at"], "claimed", **who)
    events += _event(x["started_at"], "started", **who)
    ending = _ENDINGS.get(str(x["status"]))
    if ending is not None:
        detail = x["error"]
        if x["attempt_refunded"]:
            detail = "attempt refunded" + (f": {detail}" if detail else "")
        events += _event(x["finished_at"], ending, detail, **who)
    return events


def timeline(
    job: Mapping[str, Any],
    executions: Iterable[Mapping[str, Any]],
    dead_letters: Iterable[Mapping[str, Any]],
) -> list[dict[str, Any]]:
    """Every step of the job, oldest first (ties keep the order they happen in)."""
    events = _event(job["created_at"], "created", f"queue {job['queue']}, task {job['task']}")
    if job["run_at"] is not None and job["run_at"] > job["created_at"]:
        events += _event(job["run_at"], "due")
    for x in executions:
        events += _attempt_events(x)
    for d in dead_letters:
        events += _event(d["dead_at"], "dead_lettered", d["reason"])
        replay = f"as job {d['replayed_job_id']}" if d["replayed_job_id"] else None
        events += _event(d["replayed_at"], "replayed", replay)
    if job["status"] == "cancelled" and not any(e["event"] == "cancelled" for e in events):
        events += _event(job["finished_at"] or job["updated_at"], "cancelled")
    return sorted(events, key=lambda e: e["at"])
