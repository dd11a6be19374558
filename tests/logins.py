"""Real LOGIN roles for role tests: connect as a role holding only one codity_* role.

``SET ROLE`` from a superuser session is not the same thing: the session user stays a
superuser, the temporary schema belongs to it, and a check that asks who the session is
would pass for the wrong reason. These are real logins with a password (so they work on a
server that asks for one as well as on the embedded one, which trusts loopback).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg
from psycopg import sql

__all__ = ["login_role", "url_as"]


def url_as(url: str, user: str, password: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{quote(user, safe='')}:{quote(password, safe='')}@{host}"
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))


@contextmanager
def login_role(admin_url: str, member_of: str) -> Iterator[str]:
    """A new LOGIN role that is a member of ``member_of`` only; yields a URL that logs in as it.

    The role is dropped afterwards, with whatever it owns (roles are cluster-wide).
    """
    name = f"login_{member_of.removeprefix('codity_')}_{secrets.token_hex(4)}"
    password = secrets.token_urlsafe(16)
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(
            sql.SQL("CREATE ROLE {} LOGIN PASSWORD {} IN ROLE {}").format(
                sql.Identifier(name), sql.Literal(password), sql.Identifier(member_of)
            )
        )
    try:
        yield url_as(admin_url, name, password)
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_catalog.pg_terminate_backend(pid) FROM pg_catalog.pg_stat_activity"
                " WHERE usename = %s",
                [name],
            )
            admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))
