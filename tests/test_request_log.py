"""The request line is written before the response's last byte is sent (issue 29, item 3).

It used to be written after, in the middleware's ``finally``: a client holding the whole
answer could finish first — a test ended, pytest closed its log capture — and the line then
met a closed stream ("--- Logging error --- ... Message: 'request'" between the progress
dots, in CI too). Here the middleware wraps a plain ASGI app and the ``send`` it is given
looks, as the last body message arrives, for the line: it must be there already. Break it:
move ``log_request()`` back to the ``finally`` only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import MutableMapping
from typing import Any

import pytest

from codity.web.middleware import RequestContext


async def _plain(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 201, "headers": []})
    await send({"type": "http.response.body", "body": b"one", "more_body": True})
    await send({"type": "http.response.body", "body": b"two"})


async def _broken(scope: Any, receive: Any, send: Any) -> None:
    raise RuntimeError("boom")


def _call(app: Any, caplog: pytest.LogCaptureFixture) -> list[tuple[str, int]]:
    """Each message sent, with how many request lines were written when it was."""
    seen: list[tuple[str, int]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        lines = sum(r.getMessage() == "request" for r in caplog.records)
        seen.append((f"{message['type']}{'+' if message.get('more_body') else ''}", lines))

    scope = {"type": "http", "method": "GET", "path": "/x", "headers": []}
    asyncio.run(RequestContext(app)(scope, receive, send))
    return seen


def test_the_request_line_is_written_before_the_last_byte(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="codity")
    assert _call(_plain, caplog) == [
        ("http.response.start", 0),
        ("http.response.body+", 0),
        ("http.response.body", 1),
    ]
    (line,) = [r for r in caplog.records if r.getMessage() == "request"]
    assert (line.status, line.path, line.method) == (201, "/x", "GET")  # type: ignore[attr-defined]


def test_a_failed_request_is_written_once_before_its_error_answer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="codity")
    assert _call(_broken, caplog) == [("http.response.start", 0), ("http.response.body", 1)]
    lines = [r for r in caplog.records if r.getMessage() == "request"]
    assert [r.status for r in lines] == [500]  # type: ignore[attr-defined]
