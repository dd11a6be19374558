"""Handlers for the demo data set (emails, reports, webhooks) and for benchmarks.

The work is simulated: a short sleep, then success or an error at a configurable rate —
``failure_rate`` in the payload, else CODITY_DEMO_FAILURE_RATE, else 0.2 — so the demo
shows retries with backoff and, eventually, dead letters. A payload with
``"permanent": true`` raises a non-retryable error (dead-lettered at once).
The registry also holds the built-in ``http_request`` task (SSRF-guarded).
Run them with ``codity worker --app codity.worker.demo:registry``.
"""

from __future__ import annotations

import asyncio
import os
import random
from typing import Any

from codity.worker.context import JobContext
from codity.worker.http_request import register_http_request
from codity.worker.registry import NonRetryable, Registry

__all__ = ["registry"]

registry = Registry()
register_http_request(registry)


class SimulatedOutage(Exception):
    """A downstream service that failed this time; the retry may succeed."""


def _failure_rate(payload: dict[str, Any]) -> float:
    rate = payload.get("failure_rate", os.environ.get("CODITY_DEMO_FAILURE_RATE", 0.2))
    return min(max(float(rate), 0.0), 1.0)


async def _simulate(
    payload: dict[str, Any], ctx: JobContext, seconds: float, what: str
) -> dict[str, Any]:
    if payload.get("permanent"):
        raise NonRetryable(f"{what}: rejected permanently (payload asked for it)")
    await asyncio.sleep(float(payload.get("duration_s", seconds)))
    if random.random() < _failure_rate(payload):
        raise SimulatedOutage(f"{what}: downstream unavailable (simulated)")
    ctx.logger.info("%s done", what)
    return {"ok": True, "attempt": ctx.attempt}


@registry.task("emails.send", queue="emails")
async def send_email(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    return await _simulate(payload, ctx, 0.05, "email")


@registry.task("reports.generate", queue="reports")
async def generate_report(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    return await _simulate(payload, ctx, 0.5, "report")


@registry.task("webhooks.deliver", queue="webhooks")
async def deliver_webhook(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    return await _simulate(payload, ctx, 0.1, "webhook")


@registry.task("bench.noop")
async def noop(payload: Any, ctx: JobContext) -> None:
    """Does nothing: measures the runtime's own cost."""
