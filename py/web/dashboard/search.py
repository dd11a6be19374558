"""The jobs screen's search: one line of ``key:value`` words, and the filters it stands for.

The grammar, words separated by spaces, each at most once (``payload.<path>`` once per
path), a value with spaces in double quotes::

    queue:emails task:send state:dead_letter id:42 worker:7
    payload.customer.id:42 payload.name:"Ada Lovelace"
    after:2026-12-01T00:00Z before:2026-12-02

``state`` is one of the screen's tabs (:data:`codity.web.endpoints.jobs.TABS`); ``after``
and ``before`` bound the creation time (ISO 8601, a date alone is midnight, no zone is
UTC); ``payload.a.b:v`` means the payload contains ``{"a": {"b": v}}``, where an unquoted
``v`` that reads as a JSON number, true, false or null is that, and anything else (or
anything quoted) is a string. Anything else is a :class:`SearchError` whose message says
what is wrong and how to write it, for the page to show instead of a list.

:class:`JobSearch` is the parsed form. It goes to three places: the API's filter fields
(:meth:`JobSearch.api_match`), the page's URL (:meth:`JobSearch.url`, one parameter per
filter, the payload as JSON) and back into the search box (:meth:`JobSearch.text`), so a
link, a tab and the box always agree.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlencode

from codity.web.endpoints.jobs import TABS
from codity.web.fields import MAX_ID

__all__ = ["KEYS", "JobSearch", "SearchError", "parse_search"]

KEYS = ("queue", "task", "state", "id", "worker", "payload.<path>", "after", "before")
_MAX_TEXT = 200
_MAX_SEARCH = 2000
_MAX_DEPTH = 16
_WORD = re.compile(r'\s*(?:([^\s:"]+):(?:"((?:[^"\\]|\\.)*)"|([^\s"]*))|(\S+))')
_NUMBER = re.compile(r"-?(?:0|[1-9]\d{0,17})(?:\.\d+)?")


class SearchError(ValueError):
    """A search the page cannot run; the message is for the operator, as it is."""


@dataclass(frozen=True, slots=True)
class JobSearch:
    queue: str = ""
    task: str = ""
    state: str = "all"
    id: int | None = None
    worker: int | None = None
    payload: dict[str, Any] = field(default_factory=dict)
    after: str = ""
    before: str = ""
    """Times as ISO 8601 text in UTC (what :func:`_moment` made of what was typed)."""

    @classmethod
    def from_query(cls, values: Mapping[str, str]) -> JobSearch:
        """The filters of a page URL or form: the search box ``q`` if given (the tab in
        ``state`` kept unless the search names one), else one parameter per filter
        (``worker_id`` read as ``worker``)."""
        state = values.get("state") or "all"
        if state not in TABS:
            raise SearchError(_bad_state(state))
        if values.get("q", "").strip():
            found = parse_search(values["q"])
            return found if found.state != "all" else replace(found, state=state)
        words = []
        for key in ("queue", "task", "id", "worker", "after", "before"):
            # worker_id: the API's name, which links from the workers screen use.
            given = values.get(key) or (values.get("worker_id") if key == "worker" else None)
            if value := (given or "").strip():
                words.append((key, value))
        if payload := values.get("payload", "").strip():
            try:
                parsed = json.loads(payload)
            except ValueError:
                raise SearchError(
                    'payload: not JSON; write e.g. {"customer": {"id": 42}}'
                ) from None
            if not isinstance(parsed, dict):
                raise SearchError('payload: must be a JSON object, e.g. {"customer": {"id": 42}}')
            words += [(f"payload.{k}", v) for k, v in _flatten(parsed)]
        return replace(_build(words), state=state)

    def api_match(self) -> dict[str, Any]:
        """The filter fields of ``GET /api/v1/jobs`` (and the bulk ``filter``), state aside."""
        found: dict[str, Any] = {}
        for name, api in (("queue", "queue"), ("task", "task"), ("id", "id")):
            if (value := getattr(self, name)) not in ("", None):
                found[api] = value
        if self.worker is not None:
            found["worker_id"] = self.worker
        if self.payload:
            found["payload"] = self.payload
        if self.after:
            found["created_after"] = self.after
        if self.before:
            found["created_before"] = self.before
        return found

    def api_filter(self) -> dict[str, Any]:
        """:meth:`api_match` with the tab's statuses."""
        statuses = TABS[self.state]
        return {**self.api_match(), **({"status": list(statuses)} if statuses else {})}

    def url(self, **extra: Any) -> str:
        """A query string that gives these filters back (``extra`` added, None left out)."""
        values: dict[str, Any] = {
            "state": self.state if self.state != "all" else None,
            "queue": self.queue or None,
            "task": self.task or None,
            "id": self.id,
            "worker": self.worker,
            "payload": json.dumps(self.payload, separators=(",", ":")) if self.payload else None,
            "after": self.after or None,
            "before": self.before or None,
            **extra,
        }
        return urlencode({k: v for k, v in values.items() if v is not None})

    def text(self, *, with_state: bool = False) -> str:
        """The search box's words for these filters (the tab left out: the tabs show it)."""
        words = []
        if with_state and self.state != "all":
            words.append(("state", self.state))
        words += [(k, _quoted(getattr(self, k))) for k in ("queue", "task") if getattr(self, k)]
        words += [(k, str(getattr(self, k) or "")) for k in ("id", "worker")]
        words += [(f"payload.{k}", _literal(v)) for k, v in _flatten(self.payload)]
        words += [("after", self.after), ("before", self.before)]
        return " ".join(f"{k}:{v}" for k, v in words if v)

    @property
    def empty(self) -> bool:
        return not self.text(with_state=True)


def parse_search(text: str) -> JobSearch:
    """The filters a search line stands for; :class:`SearchError` when it is not one."""
    if len(text) > _MAX_SEARCH:
        raise SearchError(f"the search is longer than {_MAX_SEARCH} characters")
    words: list[tuple[str, Any]] = []
    position = 0
    text = text.rstrip()
    while position < len(text):
        match = _WORD.match(text, position)
        if match is None:
            raise SearchError(f'unclosed quote near "{text[position:].strip()[:40]}"')
        key, quoted, plain, stray = match.groups()
        position = match.end()
        if stray is not None:
            raise SearchError(
                f'"{stray[:40]}" is not a filter; write key:value with a key among '
                f'{", ".join(KEYS)} (quote a value with spaces: task:"a b")'
            )
        value = quoted.replace('\\"', '"').replace("\\\\", "\\") if quoted is not None else plain
        if value == "" and text.startswith('"', position):
            raise SearchError(f'{key}: a quote is not closed; write {key}:"a value"')
        if value == "":
            raise SearchError(f"{key}: give a value after the colon")
        words.append((key, value if quoted is not None else _scalar(key, value)))
    return _build(words)


def _build(words: list[tuple[str, Any]]) -> JobSearch:
    """Check each (key, value) and put them together."""
    values: dict[str, Any] = {}
    payload: dict[str, Any] = {}
    for key, value in words:
        if key.startswith("payload."):
            _put(payload, key, value)
            continue
        if key in values:
            raise SearchError(f"{key}: given twice; give each filter once")
        values[key] = _checked(key, str(value))
    return JobSearch(payload=payload, **values)


def _scalar(key: str, value: str) -> Any:
    """An unquoted payload value as JSON reads it (42, 1.5, true, null), else text."""
    if not key.startswith("payload."):
        return value
    if value in ("true", "false", "null") or _NUMBER.fullmatch(value):
        return json.loads(value)
    return value


def _checked(key: str, value: str) -> Any:
    if key in ("queue", "task"):
        if len(value) > _MAX_TEXT or "\x00" in value:
            raise SearchError(f"{key}: at most {_MAX_TEXT} characters")
        return value
    if key == "state":
        if value not in TABS:
            raise SearchError(_bad_state(value))
        return value
    if key in ("id", "worker"):
        if not value.isascii() or not value.isdigit() or not 1 <= int(value) <= MAX_ID:
            raise SearchError(
                f"{key}: must be a whole number from 1 to {MAX_ID}, not {value[:40]!r}"
            )
        return int(value)
    if key in ("after", "before"):
        return _moment(key, value)
    if key == "payload":
        raise SearchError("payload: name a key, e.g. payload.customer.id:42")
    raise SearchError(f'"{key[:40]}" is not a filter; use one of {", ".join(KEYS)}')


def _bad_state(value: str) -> str:
    return f"state: {value[:40]!r} is not a state; use one of {', '.join(TABS)}"


def _moment(key: str, value: str) -> str:
    """ISO 8601 text as UTC: "2026-12-01T00:00Z", "2026-12-01 09:30", "2026-12-01"."""
    try:
        moment = dt.datetime.fromisoformat(value)
    except ValueError:
        raise SearchError(
            f"{key}: {value[:40]!r} is not a time; write e.g. 2026-12-01T09:30Z or 2026-12-01"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


def _put(payload: dict[str, Any], key: str, value: Any) -> None:
    """``payload.a.b`` = value into ``{"a": {"b": value}}``."""
    path = key.split(".")[1:]
    if any(part == "" for part in path):
        raise SearchError(
            f"{key[:60]}: a payload path names keys between dots, e.g. payload.customer.id"
        )
    if len(path) > _MAX_DEPTH:
        raise SearchError(f"{key[:60]}: a payload path is at most {_MAX_DEPTH} keys deep")
    node = payload
    for part in path[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise SearchError(f"{key[:60]}: conflicts with another payload filter")
        node = child
    if path[-1] in node:
        raise SearchError(f"{key[:60]}: given twice, or conflicts with another payload filter")
    node[path[-1]] = value


def _flatten(value: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """``{"a": {"b": 1}}`` as [("a.b", 1)]; a list or an empty object stays a leaf."""
    leaves: list[tuple[str, Any]] = []
    for key, item in value.items():
        path = f"{prefix}{key}"
        if isinstance(item, dict) and item:
            leaves += _flatten(item, path + ".")
        else:
            leaves.append((path, item))
    return leaves


def _literal(value: Any) -> str:
    """A payload leaf as the search box writes it: a string that would read as something
    else (42, true, has spaces) quoted; a number, true, false or null bare. A list or an
    empty object (only a URL's JSON can hold one) is written as quoted JSON, which the box
    reads back as a string: the URL, not the box, carries those."""
    if isinstance(value, str):
        return _quoted(value, always=_scalar("payload.", value) is not value)
    if value is None or isinstance(value, bool | int | float):
        return json.dumps(value)
    return _quoted(json.dumps(value, separators=(",", ":")), always=True)


def _quoted(value: str, *, always: bool = False) -> str:
    if value and not always and not re.search(r'[\s"\\]', value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
