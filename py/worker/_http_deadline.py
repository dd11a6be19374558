"""One deadline for a whole ``http_request`` call, and the connection that honours it.

A per-operation socket timeout lets a server that sends one byte just inside each timeout
hold the call for ever. So the call has one point in time (``Deadline``), and every wait is
cut to what is left of it: the name lookup (``resolve_within``), the connect and TLS
handshake (``PinnedConnection.connect``), and every send and read after them (the socket
wrapper http.client is handed). Running out raises ``TimeoutError``; the handler turns that
into its retryable ``HttpTimeoutError``.

``PinnedConnection`` also closes the SSRF gap between check and use: it connects to the
address ``resolve_within`` checked, never through a second lookup.

Kept apart from http_request.py because it is socket plumbing that knows nothing of
payloads, statuses or redirects.
"""

from __future__ import annotations

import http.client
import io
import socket
import ssl
import threading
import time
from concurrent.futures import Future
from typing import TYPE_CHECKING

from codity.worker._http_payload import Target
from codity.worker.ssrf import Allowlist, IPAddress, resolve_checked

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

__all__ = ["Deadline", "PinnedConnection", "resolve_within"]

_SEND_CHUNK = 1 << 16


class Deadline:
    """One point in time for the whole call; every wait asks how much of it is left."""

    def __init__(self, seconds: float) -> None:
        self._at = time.monotonic() + seconds

    def remaining(self) -> float:
        """Seconds left; raises TimeoutError once there are none."""
        left = self._at - time.monotonic()
        if left <= 0:
            raise TimeoutError("deadline passed")
        return left


class _DeadlineReader(io.RawIOBase):
    """Reads the socket with every wait cut to the time left, not a fresh timeout per read."""

    def __init__(self, sock: socket.socket, deadline: Deadline) -> None:
        super().__init__()
        self._sock = sock
        self._raw = sock.makefile("rb", buffering=0)  # holds the socket open while we read
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int | None:
        self._sock.settimeout(self._deadline.remaining())
        return self._raw.readinto(buffer)

    def close(self) -> None:
        self._raw.close()
        super().close()


class _DeadlineSocket:
    """The connection's socket as http.client uses it (sendall, makefile, close), every
    send and read bounded by the call's deadline: dripped bytes cannot stretch the call."""

    def __init__(self, sock: socket.socket, deadline: Deadline) -> None:
        self._sock = sock
        self._deadline = deadline
        self._readers: list[_DeadlineReader] = []

    def sendall(self, data: bytes) -> None:
        view = memoryview(data).cast("B")
        while view:
            self._sock.settimeout(self._deadline.remaining())
            view = view[self._sock.send(view[:_SEND_CHUNK]) :]

    def makefile(self, mode: str) -> io.BufferedReader:
        self._readers.append(_DeadlineReader(self._sock, self._deadline))
        return io.BufferedReader(self._readers[-1])

    def close(self) -> None:
        """http.client's close: the socket stays open while a response still reads from it."""
        self._sock.close()

    def close_all(self) -> None:
        """Close the readers too, so that a call cut short leaves no socket to the collector."""
        for reader in self._readers:
            reader.close()
        self._sock.close()


class PinnedConnection(http.client.HTTPConnection):
    """Connects to the checked address, never through a second lookup; over TLS for https,
    with the certificate verified against the URL's host name."""

    def __init__(self, target: Target, address: IPAddress, deadline: Deadline) -> None:
        super().__init__(target.host, target.port)
        self.default_port = 443 if target.scheme == "https" else 80  # Host omits it then
        self._address = address
        self._deadline = deadline
        self._tls = ssl.create_default_context() if target.scheme == "https" else None
        self._opened: _DeadlineSocket | None = None

    def __enter__(self) -> PinnedConnection:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
        if self._opened is not None:
            self._opened.close_all()

    def connect(self) -> None:
        address = (str(self._address), self.port)
        raw = socket.create_connection(address, self._deadline.remaining())
        try:
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._tls is not None:
                # The timeout bounds the whole handshake: CPython's ssl keeps one deadline.
                raw.settimeout(self._deadline.remaining())
                raw = self._tls.wrap_socket(raw, server_hostname=self.host)
        except BaseException:
            raw.close()
            raise
        self.sock = self._opened = _DeadlineSocket(raw, self._deadline)


def resolve_within(target: Target, allowlist: Allowlist, deadline: Deadline) -> IPAddress:
    """``resolve_checked`` in a helper thread, waited for until the deadline only.

    A refused address raises ``BlockedDestination``, as ``resolve_checked`` does.
    getaddrinfo cannot be interrupted: a lookup that hangs is left to end on its own (the
    system resolver's timeout), while the job gives up at its deadline.
    """
    answer: Future[list[IPAddress]] = Future()

    def lookup() -> None:
        try:
            answer.set_result(resolve_checked(target.host, target.port, allowlist))
        except Exception as exc:
            answer.set_exception(exc)

    threading.Thread(target=lookup, name="http_request-resolve", daemon=True).start()
    return answer.result(timeout=deadline.remaining())[0]
