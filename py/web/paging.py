"""Keyset pagination: opaque cursors and the ``meta`` of a page.

A list asks for one row more than the page; that extra row only says another page
follows, and the cursor for it is the key of the page's last row. Keys are never offsets,
so rows added meanwhile neither shift nor repeat a page. Cursors are opaque to clients but
checked on the way back in: one this API did not hand out is 422, never a database error.

Two keys are in use: an id (lists newest first) and a name (schedules, in name order).
Each keeps the 422 it has always answered.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from typing import Any, Protocol

from codity.web.call import Call
from codity.web.endpoint import Reply
from codity.web.errors import ApiError
from codity.web.fields import MAX_ID

__all__ = [
    "PageQuery",
    "decode_id_cursor",
    "decode_text_cursor",
    "encode_id_cursor",
    "encode_text_cursor",
    "newest_first",
    "page_meta",
]


def encode_id_cursor(last_id: int) -> str:
    return base64.urlsafe_b64encode(str(last_id).encode()).decode().rstrip("=")


def decode_id_cursor(cursor: str | None) -> int | None:
    """The id a cursor stands for; 422 when it is not one this API handed out."""
    if cursor is None:
        return None
    invalid = ApiError(
        422,
        "invalid_cursor",
        "the cursor is not valid; use next_cursor from a previous page",
        [{"location": ["query", "cursor"], "message": "not a cursor this API issued"}],
    )
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
    except (binascii.Error, ValueError) as exc:
        raise invalid from exc
    if not raw.isdigit() or not raw.isascii() or len(raw) > 19:
        raise invalid
    value = int(raw)
    if not 1 <= value <= MAX_ID:
        raise invalid
    return value


def encode_text_cursor(last: str) -> str:
    return base64.urlsafe_b64encode(last.encode("utf-8")).decode("ascii")


def decode_text_cursor(cursor: str | None) -> str | None:
    """The text key a cursor stands for; 422 unless it is exactly what
    :func:`encode_text_cursor` gives for some NUL-free text."""
    if cursor is None:
        return None
    invalid = ApiError(
        422, "invalid_cursor", "the cursor is not one this API gave out", {"field": "cursor"}
    )
    try:
        raw = base64.b64decode(cursor.encode("ascii"), altchars=b"-_", validate=True)
        text = raw.decode("utf-8")
    except (ValueError, UnicodeError, binascii.Error) as exc:
        raise invalid from exc
    if "\x00" in text or encode_text_cursor(text) != cursor:
        raise invalid
    return text


def page_meta(
    rows: list[dict[str, Any]],
    limit: int,
    key: str = "id",
    encode: Callable[[Any], str] = encode_id_cursor,
) -> dict[str, Any]:
    """Trim the look-ahead row and say where the next page starts (or that there is none)."""
    more = len(rows) > limit
    del rows[limit:]
    return {"next_cursor": encode(rows[-1][key]) if more else None, "limit": limit}


class PageQuery(Protocol):
    """A list route's query model: its filters, then ``limit`` and ``cursor``."""

    limit: int
    cursor: str | None

    def model_dump(self, *, exclude: set[str]) -> dict[str, Any]: ...


async def newest_first(call: Call[Any, Any], sql: str, query: PageQuery, **extra: Any) -> Reply:
    """One page of a project's rows, highest id first.

    ``sql`` names its parameters after the query model's filter fields (and any ``extra``),
    plus ``project_id``, ``cursor`` (the last id already seen, or null) and ``fetch`` (the
    page's size and the look-ahead row), so a new filter is a field and a WHERE line."""
    params = {
        **query.model_dump(exclude={"limit", "cursor"}),
        **extra,
        "project_id": call.project_id,
        "cursor": decode_id_cursor(query.cursor),
        "fetch": query.limit + 1,
    }
    cur = await call.conn.execute(sql, params)
    rows = [dict(r) for r in await cur.fetchall()]
    return Reply(rows, meta=page_meta(rows, query.limit))
