"""A TCP proxy in front of PostgreSQL that can lose a statement's answer after it committed.

A client whose connection dies during COMMIT does not know whether its call landed. To
make that happen on purpose, ``cut_after(pattern)`` arms the proxy: the next client message
containing ``pattern`` is forwarded, the server runs (and, in autocommit, commits) it, and
the proxy swallows the answer up to and including ReadyForQuery — the point after which the
server has certainly committed — then closes both sides. The client sees its connection
drop with the outcome unknown; the database has the call's effect.

The server's byte stream is parsed only after an armed client message, when it sits at a
message boundary (the client waits for the answer); each message is a type byte and a
length that counts itself. Runs its own event loop in a thread; plain TCP (connect with
``sslmode=disable``).

``stall()`` stands for a network partition that leaves sockets open: nothing is forwarded
either way, new connections are accepted and left waiting, and no side sees an error —
keepalives are answered by the proxy's kernel, so only a deadline notices. ``resume()``
heals it: what was held is forwarded, as TCP delivers it once a partition ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

__all__ = ["PgProxy", "running_proxy"]

_READY_FOR_QUERY = b"Z"


@dataclass
class PgProxy:
    target_host: str
    target_port: int
    port: int = 0
    cuts: int = 0  # answers swallowed so far
    _armed: list[bytes] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _loop: asyncio.AbstractEventLoop | None = None
    _stop: asyncio.Event | None = None
    _flowing: asyncio.Event | None = None
    _thread: threading.Thread | None = None

    def cut_after(self, pattern: bytes, times: int = 1) -> None:
        """Swallow the answer to the next ``times`` client messages containing ``pattern``."""
        with self._lock:
            self._armed.extend([pattern] * times)

    def url(self, url: str) -> str:
        """``url`` (of the proxied server) pointed at the proxy instead, without TLS."""
        parts = urlsplit(url)
        userinfo = parts.netloc.rpartition("@")[0]
        netloc = f"{userinfo}@127.0.0.1:{self.port}" if userinfo else f"127.0.0.1:{self.port}"
        query = "&".join(q for q in (parts.query, "sslmode=disable") if q)
        return urlunsplit((parts.scheme, netloc, parts.path, query, ""))

    def stall(self) -> None:
        """Stop forwarding, both ways and on every connection, sockets left open."""
        self._switch(on=False)

    def resume(self) -> None:
        """Forward again, what was held first."""
        self._switch(on=True)

    def _switch(self, *, on: bool) -> None:
        assert self._loop is not None and self._flowing is not None
        flowing = self._flowing

        async def flip() -> None:
            if on:
                flowing.set()
            else:
                flowing.clear()

        asyncio.run_coroutine_threadsafe(flip(), self._loop).result(5)

    def _take(self, data: bytes) -> bool:
        with self._lock:
            for i, pattern in enumerate(self._armed):
                if pattern in data:
                    del self._armed[i]
                    return True
        return False

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        writers = [client_w]
        tasks: list[asyncio.Task[None]] = []
        assert self._flowing is not None
        flowing = self._flowing
        try:
            await flowing.wait()
            server_r, server_w = await asyncio.open_connection(self.target_host, self.target_port)
            writers.append(server_w)
            cut = asyncio.Event()

            async def upstream() -> None:
                while data := await client_r.read(65536):
                    await flowing.wait()
                    if self._take(data):
                        cut.set()
                    server_w.write(data)
                    await server_w.drain()

            async def downstream() -> None:
                pending = b""
                while data := await server_r.read(65536):
                    await flowing.wait()
                    if not cut.is_set():
                        client_w.write(data)
                        await client_w.drain()
                        continue
                    pending += data
                    while len(pending) >= 5:
                        length = int.from_bytes(pending[1:5], "big")
                        if len(pending) < 1 + length:
                            break
                        kind, pending = pending[:1], pending[1 + length :]
                        if kind == _READY_FOR_QUERY:
                            self.cuts += 1
                            return  # the answer is lost; both sides are closed below

            tasks = [asyncio.create_task(upstream()), asyncio.create_task(downstream())]
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            # Close both sides before any await: if this handler is cancelled (the proxy
            # stopping) while it waits below, no socket may be left open for the garbage
            # collector to warn about in a later test.
            for writer in writers:
                writer.close()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for writer in writers:
                with contextlib.suppress(Exception):
                    await writer.wait_closed()

    def start(self) -> None:
        started = threading.Event()

        async def main() -> None:
            self._stop = asyncio.Event()
            self._flowing = asyncio.Event()
            self._flowing.set()
            handlers: set[asyncio.Task[None]] = set()

            async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
                task = asyncio.current_task()
                assert task is not None
                handlers.add(task)
                try:
                    await self._handle(r, w)
                finally:
                    handlers.discard(task)

            server = await asyncio.start_server(handle, "127.0.0.1", 0)
            self.port = server.sockets[0].getsockname()[1]
            started.set()
            await self._stop.wait()
            server.close()
            # A connection accepted just before the close has its handler task scheduled
            # but not started: let it start (and register) before cancelling, or the loop
            # closes with its writer open and a ResourceWarning fails a later test.
            for _ in range(3):
                await asyncio.sleep(0)
                for task in list(handlers):
                    task.cancel()
                await asyncio.gather(*handlers, return_exceptions=True)
            await server.wait_closed()

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(main())
                # Let the transports closed last run their connection_lost callbacks,
                # which close the sockets, before the loop goes.
                for _ in range(3):
                    loop.run_until_complete(asyncio.sleep(0))
            finally:
                loop.close()

        self._thread = threading.Thread(target=serve, name="pgproxy", daemon=True)
        self._thread.start()
        if not started.wait(10):
            raise RuntimeError("the proxy did not start")

    def stop(self) -> None:
        if self._loop is None or self._stop is None or self._thread is None:
            return
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)


@contextlib.contextmanager
def running_proxy(url: str) -> Iterator[PgProxy]:
    """A proxy in front of the server of ``url`` (a postgresql:// URL with host and port)."""
    parts = urlsplit(url)
    proxy = PgProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()
