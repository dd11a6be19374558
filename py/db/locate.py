"""Which PostgreSQL a command talks to: ``DATABASE_URL`` when set, else the embedded server."""

from __future__ import annotations

from codity.config import Settings
from codity.db.embedded import EmbeddedServer

__all__ = ["SERVER_SETTINGS", "database_url", "embedded_server"]

SERVER_SETTINGS = ("autovacuum_naptime=10s",)
"""A queue's tables churn all day: autovacuum looks at them every 10 s, not every minute
(migration 0024 sets how soon each is worth a pass; docs/RUNBOOK.md, "Server settings")."""


def embedded_server(settings: Settings) -> EmbeddedServer:
    return EmbeddedServer(
        settings.home, settings.db_port, bin_dir=settings.pg_bin, settings=SERVER_SETTINGS
    )


def database_url(settings: Settings, *, start: bool = True) -> str:
    """The URL to use; without DATABASE_URL, start the embedded server first unless start=False."""
    if settings.database_url:
        return settings.database_url
    server = embedded_server(settings)
    if start:
        server.start()
        server.ensure_database()
    return server.url()
