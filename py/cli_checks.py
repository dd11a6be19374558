"""What the command line checks before it starts anything, and how it logs.

A user's mistake — a wrong ``--app``, a taken port, a stopped database — must read as one
sentence and exit 2, never as a traceback: :class:`UsageError` carries that sentence to
``codity.cli.main``. Logs have one format per terminal: plain text when stderr is a
terminal (a person reads it), JSON lines otherwise (a collector reads it), or as
``--log-format`` / ``CODITY_LOG_FORMAT`` says; every process of ``codity up`` shares its
terminal, so they all choose alike.
"""

from __future__ import annotations

import errno
import logging
import socket
import sys

__all__ = ["UsageError", "configure_logging", "require_free_port"]


class UsageError(Exception):
    """A mistake in how codity was asked to run; the message says what to do."""


def require_free_port(host: str, port: int) -> None:
    """Raise UsageError when ``host:port`` cannot be bound (another program holds it)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise UsageError(f"cannot listen on {host!r}: {exc.strerror}") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise UsageError(
                    f"port {port} on {host} is taken by another program (is codity already up?);"
                    " stop it, or pass --port (or set PORT)"
                ) from None
            raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror}") from None


def configure_logging(level: int, log_format: str = "auto") -> None:
    """Configure the root logger once, in an entry point: text or JSON lines on stderr."""
    as_json = log_format == "json" or (log_format == "auto" and not sys.stderr.isatty())
    if as_json:
        from codity.web.logs import configure_json_logging

        configure_json_logging(level)
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root = logging.getLogger()
        root.handlers[:] = [handler]
        root.setLevel(level)
    logging.getLogger("yoyo").setLevel(logging.WARNING)
