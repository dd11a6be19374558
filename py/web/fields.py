"""The input rules several endpoint modules share: strict models, ids, names and text.

One place decides what a queue name is, how large an id can be and which characters no
text may hold, so two routes that take the same thing refuse the same values. A rule only
one module uses stays in that module (a schedule's name, a member's email).

PostgreSQL text cannot hold NUL, so NUL is refused here, as 422 bad input, rather than by
the driver later; names also refuse the other control characters, since they end up in
logs and pages.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
)

__all__ = [
    "CONTROL",
    "MAX_ID",
    "NUL_FREE",
    "BoundedText",
    "PrintableName",
    "QueueName",
    "Strict",
    "no_nul",
]

MAX_ID = 2**63 - 1
"""The largest bigint: no id beyond it can exist."""

CONTROL = r"\x00-\x1f\x7f"
"""The control characters (C0 and DEL), as the inside of a regex character class."""

NUL_FREE = r"^[^\x00]+$"
"""Not empty, no NUL, as a pattern: for fields whose 422 has always named the pattern (a
schedule's cron and task). :data:`BoundedText` says the same with :func:`no_nul`."""


class Strict(BaseModel):
    """A request model: an unknown field is an error (422), never silently ignored."""

    model_config = ConfigDict(extra="forbid")


def no_nul(value: str) -> str:
    """Refuse NUL in a validator (not a pattern): the 422 says "must not contain NUL"."""
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    return value


def readable_in_utc(value: dt.datetime) -> dt.datetime:
    """A time whose UTC falls past the year 9999 (9999-12-31T23:59-14:00) is stored by
    PostgreSQL but cannot be read back into an answer: refused before anything is written,
    since answers are read after the write commits."""
    try:
        value.astimezone(dt.UTC)
    except OverflowError:
        raise ValueError("run_at must be at most 9999-12-31T23:59:59Z") from None
    return value


RunAt = Annotated[AwareDatetime, AfterValidator(readable_in_utc)]
"""When a job is due: with an offset, and readable back in UTC."""

BoundedText = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(no_nul)]
"""A task name, idempotency key or similar short label."""

PrintableName = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=1, pattern=rf"^[^{CONTROL}]+$")
]
"""A display name, trimmed, not empty, free of control characters; each use adds its own
``max_length``."""

QueueName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")]
"""Queue names travel in URL paths: no "/" and nothing that needs escaping."""
