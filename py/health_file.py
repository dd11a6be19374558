"""CODITY_HEALTH_FILE: a file a long-running process touches after each success the database
saw (a worker's heartbeat, a scheduler's tick), so that a container healthcheck can ask
"did it succeed lately?" without a port of its own: ``codity alive --within 20``
(docker-compose.yml). Unset, nothing is written.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

__all__ = ["age_seconds", "touch"]

log = logging.getLogger(__name__)
_warned = False


def touch() -> None:
    """Mark a success now; a file that cannot be written is said once, never raised."""
    global _warned
    path = os.environ.get("CODITY_HEALTH_FILE")
    if not path:
        return
    try:
        Path(path).touch()
    except OSError as exc:
        if not _warned:
            _warned = True
            log.warning("CODITY_HEALTH_FILE %s cannot be written (%s)", path, exc)


def age_seconds(path: str) -> float | None:
    """Seconds since the last success marked in ``path``; None if there was none yet."""
    try:
        return time.time() - Path(path).stat().st_mtime
    except FileNotFoundError:
        return None
