"""Templates: Jinja2, autoescaped, loaded from the package, free of I/O.

A template receives plain data (what the API returned) and never calls anything that
reaches the database; every value is escaped unless a filter here says otherwise. Filters
turn the API's ISO times, durations and counts into what an operator reads.
"""

from __future__ import annotations

import datetime as dt
import json
from functools import lru_cache
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

__all__ = ["render"]


def _when(value: Any) -> str:
    """An ISO time as 'YYYY-MM-DD HH:MM:SS' UTC, or '—'."""
    if not value:
        return "—"
    moment = value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(str(value))
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _age(seconds: Any) -> str:
    """A duration in seconds as '3 s', '4 min', '2 h 5 min', '3 d'."""
    if seconds is None:
        return "—"
    s = int(float(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d"


def _duration(seconds: Any) -> str:
    """A duration to the precision it deserves: '850 ms', '3.2 s', '4 min 5 s', '2 h 5 min'."""
    if seconds is None:
        return "—"
    s = float(seconds)
    if s < 1:
        return f"{round(s * 1000)} ms"
    if s < 60:
        return f"{s:.1f} s"
    whole = int(s)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return _age(whole)


def _count(value: Any, capped: bool = False) -> str:
    text = f"{int(value):,}" if value is not None else "—"
    return f"{text}+" if capped else text


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


@lru_cache(maxsize=1)
def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("codity.web.dashboard", "templates"),
        autoescape=select_autoescape(["html"]),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(when=_when, age=_age, duration=_duration, count=_count, pretty=_pretty)
    return env


def render(template: str, values: dict[str, Any]) -> str:
    return _environment().get_template(template).render(values)
