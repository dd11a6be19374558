"""Everything that talks to PostgreSQL: where it is, how it is migrated, what its errors mean."""

from codity.db.errors import (
    CodityError,
    Conflict,
    IllegalTransition,
    InvalidInput,
    NotFound,
    WorkerNotActive,
    translate,
)
from codity.db.locate import database_url, embedded_server
from codity.db.migrate import migrate

__all__ = [
    "CodityError",
    "Conflict",
    "IllegalTransition",
    "InvalidInput",
    "NotFound",
    "WorkerNotActive",
    "database_url",
    "embedded_server",
    "migrate",
    "translate",
]
