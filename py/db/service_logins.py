"""One login per service for ``codity up``: the web app, the scheduler and the workers each
connect holding only the role they need, not as the login that migrates.

- web: ``codity_web_login``, holding ``codity_app`` (every transaction runs as it);
- scheduler: ``codity_scheduler_login``, holding ``codity_app`` (``codity.tick``, ``prune``);
- worker: ``codity_worker_login``, holding ``codity_worker`` (the worker protocol, no table).

Each password is generated once and kept in ``CODITY_HOME/service_logins`` (mode 0600,
beside the JWT secret), and set again on every ``codity up``, so a login whose password was
changed by hand, or a new home on the same database, works again. A login gets no other
attribute (no CREATEROLE, no BYPASSRLS, not a superuser).

When the migrating login may not create roles (a managed database's least privileged
owner), the services keep its URL and a warning says so: nothing else changes.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg
from psycopg import sql

from codity.db.conninfo import conninfo

__all__ = ["SERVICES", "URLS_FOLDER", "login_name", "service_urls", "write_service_urls"]

log = logging.getLogger(__name__)

SERVICES = {"web": "codity_app", "scheduler": "codity_app", "worker": "codity_worker"}
"""Each service and the one role its login holds."""
_FILE = "service_logins"
URLS_FOLDER = "service-urls"
"""Under CODITY_HOME: one file per service holding the URL it connects with
(``codity migrate --service-logins``; a service reads its own through DATABASE_URL_FILE)."""


def login_name(service: str) -> str:
    return f"codity_{service}_login"


def _passwords(home: Path) -> dict[str, str]:
    """The kept passwords, one per service, made (and written 0600) where missing."""
    path = home / _FILE
    kept: dict[str, str] = {}
    if path.exists():
        loaded = json.loads(path.read_text())
        kept = {k: v for k, v in loaded.items() if isinstance(v, str) and v}
    if set(kept) >= set(SERVICES):
        return kept
    kept |= {s: secrets.token_urlsafe(32) for s in SERVICES if s not in kept}
    home.mkdir(parents=True, exist_ok=True)
    _write_private(path, json.dumps(kept))
    return kept


def _write_private(path: Path, text: str) -> None:
    """``text`` into ``path``, readable by this user only (0600), replaced whole."""
    fresh = path.with_name(f".{path.name}.new")
    fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    fresh.replace(path)


def _with_login(url: str, user: str, password: str) -> str:
    """``url`` with its user and password replaced (a postgresql:// URL)."""
    parts = urlsplit(url)
    hosts = parts.netloc.rpartition("@")[2]
    netloc = f"{quote(user, safe='')}:{quote(password, safe='')}@{hosts}"
    return urlunsplit(parts._replace(netloc=netloc))


def service_urls(url: str, home: Path) -> dict[str, str]:
    """Make or update the services' logins; the URL each service connects with. A URL that
    is not postgresql:// (a key=value string), or a migrating login that may not create
    roles, leaves every service on ``url``."""
    if not url.startswith(("postgresql://", "postgres://")):
        log.warning("DATABASE_URL is not a postgresql:// URL: the services connect with it")
        return dict.fromkeys(SERVICES, url)
    passwords = _passwords(home)
    try:
        with psycopg.connect(conninfo(url), autocommit=True) as conn:
            for service, role in SERVICES.items():
                _ensure(conn, login_name(service), role, passwords[service])
    except psycopg.errors.InsufficientPrivilege as exc:
        log.warning(
            "the services connect as the migrating login: it may not create their own (%s)",
            exc.diag.message_primary,
        )
        return dict.fromkeys(SERVICES, url)
    return {s: _with_login(url, login_name(s), passwords[s]) for s in SERVICES}


def _ensure(conn: psycopg.Connection, login: str, role: str, password: str) -> None:
    exists = conn.execute("SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = %s", [login])
    verb = "ALTER" if exists.fetchone() else "CREATE"
    conn.execute(
        sql.SQL("{} ROLE {} LOGIN PASSWORD {}").format(
            sql.SQL(verb), sql.Identifier(login), sql.Literal(password)
        )
    )
    conn.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(role), sql.Identifier(login)))


def write_service_urls(url: str, home: Path) -> Path:
    """``codity migrate --service-logins``: make or update the logins, as ``codity up`` does,
    and write each service's URL to ``home/service-urls/<service>`` (mode 0600), for
    processes started elsewhere (Compose) to read through ``DATABASE_URL_FILE``."""
    folder = home / URLS_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    for service, service_url in service_urls(url, home).items():
        _write_private(folder / service, service_url + "\n")
    return folder
