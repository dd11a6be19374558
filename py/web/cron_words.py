"""A schedule's cron expression in plain words ("At 02:00, every day"), for people.

The words come from the cron-descriptor library, in English and 24-hour time, but never
straight from what the user typed: cron-descriptor refuses some expressions codity accepts
("0 0 * * 3,*", "* * * * *,*/7") and misreads others ("*/100" is minute 0 to codity, "every
100 minutes" to it; "0-7" is every day, not "Sunday through Sunday"). So each field is first
read the way codity.cron_next reads it (sql/functions/cron_next.sql: a comma list of ``*``,
``n``, ``a-b``, ``*/s``, ``a-b/s``, ``a/s``, month and day names in any case, day-of-week 7
= Sunday, steps past the field's width capped) into the set of values it matches, and that
set is written back in the few shapes cron-descriptor describes correctly: ``*``, ``*/s``,
``a/s``, ``a-b/s``, ``a-b``, ``n`` and lists of ``n`` and ``a-b``.

Day-of-month and day-of-week keep whether they start with ``*``, since codity (as Vixie
cron) matches a day on both fields when either does and on either field otherwise; where
cron-descriptor would say "or" for a day that must match both, the words say "only on".

Anything that still fails gives the expression itself: a description never raises.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from functools import lru_cache

from cron_descriptor import Options, get_description  # type: ignore[import-untyped]

__all__ = ["describe_cron"]

log = logging.getLogger(__name__)

_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_MAX_STEP = 100
"""codity caps a step at 100 (past the field's width it only picks the first value)."""


@dataclass(frozen=True, slots=True)
class _Field:
    lo: int
    hi: int
    names: tuple[str, ...] = ()
    name_base: int = 0
    day: bool = False
    """Day-of-month and day-of-week: whether the field starts with '*' decides AND vs OR."""
    start_step: bool = True
    """cron-descriptor words 'a/s' well here ("starting at ..."); months and weekdays lose
    the start, so they get 'a-b/s'."""


_FIELDS = (
    _Field(0, 59),
    _Field(0, 23),
    _Field(1, 31, day=True),
    _Field(1, 12, _MONTHS, name_base=1, start_step=False),
    _Field(0, 7, _DAYS, day=True, start_step=False),
)


class _Unreadable(ValueError):
    """Not an expression codity accepts (it never stores one): describe it as it is."""


def _value(text: str, field: _Field) -> int:
    if text in field.names:
        return field.names.index(text) + field.name_base
    if not text.isascii() or not text.isdigit():
        raise _Unreadable(text)
    value = int(text)
    if not field.lo <= value <= field.hi:
        raise _Unreadable(text)
    return value


def _values(text: str, field: _Field) -> set[int]:
    """The values one field matches, as codity._cron_parse_field reads it."""
    found: set[int] = set()
    for term in text.split(","):
        base, slash, step_text = term.partition("/")
        step = 1
        if slash:
            if not step_text.isascii() or not step_text.isdigit() or int(step_text) == 0:
                raise _Unreadable(term)
            step = min(int(step_text), _MAX_STEP)
        if base == "*":
            lo, hi = field.lo, field.hi
        else:
            first, dash, rest = base.partition("-")
            lo = _value(first, field)
            hi = _value(rest, field) if dash else lo
            if hi < lo:
                raise _Unreadable(term)
            if slash and not dash:
                hi = field.hi
        found.update(range(lo, hi + 1, step))
    if field.hi == 7 and 7 in found:
        found = (found - {7}) | {0}
    return found


def _runs(values: list[int], field: _Field) -> str:
    """A sorted set as a list of single values and ranges of three or more. Sunday is
    written 7 when Saturday is in the set too, so a week-end reads "Saturday and Sunday"
    and "5-7" stays "Friday through Sunday"."""
    if field.hi == 7 and 0 in values and 6 in values:
        values = sorted(v or 7 for v in values)
    parts: list[str] = []
    start = previous = values[0]
    for value in [*values[1:], None]:
        if value is not None and value == previous + 1:
            previous = value
            continue
        if previous - start >= 2:
            parts.append(f"{start}-{previous}")
        else:
            parts.extend(str(v) for v in range(start, previous + 1))
        if value is not None:
            start = previous = value
    return ",".join(parts)


def _canonical(text: str, field: _Field) -> str:
    """The field as a shape cron-descriptor words right: '*' for every value, a step only
    where the user wrote one, else the values and ranges themselves."""
    values = sorted(_values(text, field))
    top = 6 if field.hi == 7 else field.hi
    starred = text.startswith("*") or not field.day
    if values == list(range(field.lo, top + 1)):
        return "*" if starred else f"{field.lo}-{top}"
    if len(values) == 1:
        return str(values[0])
    step = values[1] - values[0]
    if "/" not in text or step == 1 or any(b - a != step for a, b in itertools.pairwise(values)):
        return _runs(values, field)
    if starred and values == list(range(field.lo, top + 1, step)):
        return f"*/{step}"
    if field.start_step and values[-1] + step > top:
        return f"{values[0]}/{step}"
    if len(values) >= 3:
        return f"{values[0]}-{values[-1]}/{step}"
    return _runs(values, field)


@lru_cache(maxsize=1)
def _options() -> Options:
    return Options(locale_code="en_US", use_24hour_time_format=True, verbose=False)


@lru_cache(maxsize=2048)
def describe_cron(cron: str) -> str:
    """The expression in plain words, or the expression itself when it cannot be read."""
    fields = cron.upper().split()
    try:
        if len(fields) != len(_FIELDS):
            raise _Unreadable(cron)
        canonical = [_canonical(text, field) for text, field in zip(fields, _FIELDS, strict=True)]
        words = str(get_description(" ".join(canonical), _options()))
    except Exception:  # any failure of the third-party describer: the raw text
        log.warning("cron expression not described", extra={"cron": cron})
        return cron
    both_days_restricted = canonical[2] != "*" and canonical[4] != "*"
    days_and = fields[2].startswith("*") or fields[4].startswith("*")
    if both_days_restricted and days_and:
        words = words.replace(", or on ", ", only on ")
    if canonical[2:] == ["*", "*", "*"] and all(_fixed(f) for f in canonical[:2]):
        # cron-descriptor says "At 02:00" for a daily time; people read "every day" into it
        # only if told.
        words += ", every day"
    return words


def _fixed(field: str) -> bool:
    """A field of single values only ("2", "2,14"): the times of day are spelled out."""
    return all(part.isdigit() for part in field.split(","))
