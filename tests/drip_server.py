"""A real HTTP server on a loopback port whose answers are scripts, for the http_request tests.

A script may send its answer whole, drip it one byte at a time, or repeat a piece (a flood
of ``100 Continue``) until the client hangs up. Every script ends by itself after
``limit_s``, so a client with no working deadline still finishes (and its test fails on the
elapsed time instead of hanging). The server records each request's path and headers, so a
test can see exactly what reached which origin::

    slow = script(send(b"HTTP/1.1 200 OK\\r\\n"), drip(b"X-Pad: 1\\r\\n\\r\\n", every=0.1))
    with DripServer({"/slow": slow, "/ok": send(answer(200, b"ok"))}) as s:
        http_request({"url": f"{s.url}/slow", "timeout_s": 1}, ctx)
        assert s.headers("/slow")[0]["authorization"] == "..."

With ``on_connect`` the server reads nothing and runs that script on every connection (a
TLS handshake that never completes, for instance).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from types import TracebackType

__all__ = [
    "Answer",
    "DripServer",
    "Route",
    "answer",
    "drip",
    "redirect",
    "repeat",
    "script",
    "send",
]


class Answer:
    """One connection's way back to the client, bounded by the server's stop and a time limit."""

    def __init__(self, conn: socket.socket, stop: threading.Event, limit_s: float) -> None:
        self._conn = conn
        self._stop = stop
        self._until = time.monotonic() + limit_s

    def _wait(self, seconds: float) -> bool:
        """Sleep; False when the server stops or the script's time is up."""
        return not self._stop.wait(seconds) and time.monotonic() < self._until

    def send(self, data: bytes) -> None:
        self._conn.sendall(data)

    def drip(self, data: bytes, every: float) -> None:
        for i in range(len(data)):
            if not self._wait(every):
                return
            self._conn.sendall(data[i : i + 1])

    def repeat(self, data: bytes, every: float) -> None:
        while self._wait(every):
            self._conn.sendall(data)


Route = Callable[[Answer], None]


def send(data: bytes) -> Route:
    return lambda a: a.send(data)


def drip(data: bytes, every: float) -> Route:
    return lambda a: a.drip(data, every)


def repeat(data: bytes, every: float) -> Route:
    return lambda a: a.repeat(data, every)


def script(*steps: Route) -> Route:
    """The steps one after the other, on the same connection."""

    def run(a: Answer) -> None:
        for step in steps:
            step(a)

    return run


def answer(status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> bytes:
    """A complete HTTP/1.1 response that closes the connection."""
    lines = [f"HTTP/1.1 {status} X", f"Content-Length: {len(body)}", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def redirect(location: str, status: int = 302) -> Route:
    return send(answer(status, headers={"Location": location}))


class DripServer:
    def __init__(
        self,
        routes: dict[str, Route] | None = None,
        *,
        on_connect: Route | None = None,
        limit_s: float = 5.0,
    ) -> None:
        self.routes = routes if routes is not None else {}
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        self._on_connect = on_connect
        self._limit_s = limit_s
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self.port: int = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def headers(self, path: str) -> list[dict[str, str]]:
        """The headers (names lower-cased) of every request for ``path``, in order."""
        return [h for p, h, _ in self.requests if p == path]

    def close(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=2)
        self._listener.close()

    def __enter__(self) -> DripServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _addr = self._listener.accept()
            except TimeoutError:
                continue
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(2)
            try:
                route = self._on_connect or self._read_request(conn)
                route(Answer(conn, self._stop, self._limit_s))
            except OSError:
                pass  # the client hung up first: its deadline or size cap did that on purpose

    def _read_request(self, conn: socket.socket) -> Route:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                raise ConnectionResetError("client closed before its request ended")
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        request_line, *lines = head.decode("latin-1").split("\r\n")
        headers: dict[str, str] = {}
        for line in lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        while len(body) < int(headers.get("content-length", "0")):
            body += conn.recv(65536)
        path = request_line.split(" ")[1]
        self.requests.append((path, headers, body))
        return self.routes.get(path, send(answer(404)))
