"""CODITY_HEALTH_FILE: a file a long-running process touches after each success the database
saw (a worker's heartbeat, a scheduler's tick), so that a container healthcheck can ask
"did it succeed lately?" without a port of its own: ``codity alive --within 20``, or, as
docker-compose.yml runs it every few seconds, ``python3 -m codity.health_file --within 20``
(the same answer in a fifth of the time: this module imports no database driver). Unset,
nothing is written.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

__all__ = ["age_seconds", "touch", "verdict"]

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


def verdict(within: float) -> tuple[int, str]:
    """``codity alive``'s answer: exit code 0 and a line for stdout when CODITY_HEALTH_FILE
    was marked in the last ``within`` seconds, else 1 and a line for stderr; 2 when the
    variable is not set."""
    path = os.environ.get("CODITY_HEALTH_FILE")
    if not path:
        return 2, "alive: CODITY_HEALTH_FILE is not set (the file a worker or scheduler marks)"
    age = age_seconds(path)
    if age is None:
        return 1, f"not alive: nothing marked in {path} yet"
    if age > within:
        return 1, f"not alive: last success {age:.0f}s ago (allowed {within:g}s)"
    return 0, f"alive: last success {age:.1f}s ago"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m codity.health_file")
    parser.add_argument("--within", type=float, default=20.0)
    code, line = verdict(parser.parse_args().within)
    print(line, file=sys.stdout if code == 0 else sys.stderr)
    sys.exit(code)
