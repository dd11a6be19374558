"""JSON-lines logging for the web app, configured by its entry point only.

One object per line with the time, level, logger and message, the id of the request being
served (from a context variable the middleware sets, so handlers' own lines carry it too),
plus whatever ``extra`` fields the caller passed (method, path, status, duration). Callers
pass sizes and keys, never values: no password, token, key or payload value reaches a log
line.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from contextvars import ContextVar
from typing import Any

__all__ = ["JsonFormatter", "configure_json_logging", "current_request_id"]

current_request_id: ContextVar[str | None] = ContextVar("codity_request_id", default=None)
"""Set by the request middleware, so every line logged while serving a request carries its id."""

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        request_id = current_request_id.get()
        if request_id is not None:
            line["request_id"] = request_id
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                line[key] = value
        if record.exc_info and record.exc_info[0] is not None:
            line["exception"] = record.exc_info[0].__name__
            line["trace"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, separators=(",", ":"))


def configure_json_logging(level: int = logging.INFO) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
