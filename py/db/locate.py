"""Which PostgreSQL a command talks to: ``DATABASE_URL`` when set, else the embedded server."""

from __future__ import annotations

from codity.config import Settings
from codity.db.embedded import EmbeddedServer

__all__ = ["database_url", "embedded_server"]


def embedded_server(settings: Settings) -> EmbeddedServer:
    return EmbeddedServer(settings.home, settings.db_port, bin_dir=settings.pg_bin)


def database_url(settings: Settings, *, start: bool = True) -> str:
    """The URL to use; without DATABASE_URL, start the embedded server first unless start=False."""
    if settings.database_url:
        return settings.database_url
    server = embedded_server(settings)
    if start:
        server.start()
        server.ensure_database()
    return server.url()
