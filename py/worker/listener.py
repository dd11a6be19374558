"""The worker's wake-ups: LISTEN codity_v1 on a connection of its own, kept honest.

A notification is a hint (a queue id): the claim loop claims at once. Notifications sent
while the listener is disconnected are lost, so every (re)connect wakes the claim loop too.

A half-open connection — the server's backend stopped or gone, the socket still open — would
deliver nothing and raise nothing: pickup would silently fall back to the poll's pace. Two
guards: TCP keepalives and ``tcp_user_timeout`` let the kernel notice a dead peer, and when
nothing has arrived for ``ping_s`` the listener notifies itself on a private channel and
must hear it back within ``ping_timeout_s``, or it drops the connection and reconnects.
Reconnects back off (codity.backoff), probing the server so they happen at once when it is
back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Callable

import psycopg
from psycopg import sql

from codity.backoff import Backoff, server_address
from codity.db.conninfo import conninfo
from codity.db.deadline import shut_down
from codity.db.errors import TRANSIENT
from codity.outage import Outage

__all__ = ["CHANNEL", "Listener"]

log = logging.getLogger(__name__)

CHANNEL = "codity_v1"
# TRANSIENT includes 25006: LISTEN refused by a standby reached through a single-host URL or
# a proxy. TimeoutError: the ping unanswered.
_RECONNECT_ON: tuple[type[BaseException], ...] = (*TRANSIENT, TimeoutError)


class Listener:
    def __init__(
        self,
        url: str,
        wake: asyncio.Event,
        *,
        ping_s: float = 5.0,
        ping_timeout_s: float = 2.0,
        heard: Callable[[str | None], None] | None = None,
        outage: Outage | None = None,
    ) -> None:
        self.url = url
        self.wake = wake
        self.heard = heard
        """Told each notification's payload before the wake-up, and None on every
        (re)connect: the worker's codity.worker.empty_queues."""
        self.ping_s = ping_s
        self._outage = outage if outage is not None else Outage(log)
        self.ping_timeout_s = ping_timeout_s
        self.reconnects = 0
        self._ping_channel = f"codity_ping_{secrets.token_hex(6)}"

    async def run(self) -> None:
        backoff = Backoff()
        server = server_address(self.url)
        while True:
            try:
                info = conninfo(self.url, application_name="codity-listener")
                async with await psycopg.AsyncConnection.connect(info, autocommit=True) as conn:
                    await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(CHANNEL)))
                    await conn.execute(
                        sql.SQL("LISTEN {}").format(sql.Identifier(self._ping_channel))
                    )
                    backoff.reset()
                    self._outage.answered()
                    self._arrived(None)  # what was notified while we were away is gone
                    await self._listen(conn)
            except _RECONNECT_ON as exc:
                self.reconnects += 1
                self._outage.failed("the listener's connection", exc)
                await backoff.wait(server=server)

    async def _listen(self, conn: psycopg.AsyncConnection) -> None:
        while True:
            heard = False
            async for notify in conn.notifies(timeout=self.ping_s):
                heard = True
                if notify.channel == CHANNEL:
                    self._arrived(notify.payload)
            if not heard:
                await self._ping(conn)

    def _arrived(self, payload: str | None) -> None:
        if self.heard is not None:
            self.heard(payload)
        self.wake.set()

    async def _ping(self, conn: psycopg.AsyncConnection) -> None:
        """Notify ourselves and hear it back in time, or raise TimeoutError (reconnect)."""
        token = secrets.token_hex(4)
        ping = asyncio.create_task(self._round_trip(conn, token))
        done, _ = await asyncio.wait([ping], timeout=self.ping_timeout_s)
        if ping in done:
            ping.result()
            return
        log.warning("listener got no answer in %.1fs: the connection is dead", self.ping_timeout_s)
        # Cancelling the hung call would make psycopg ask the server to cancel it, and wait
        # for an answer a frozen server never gives. Shutting the socket down makes the call
        # fail at once instead; the connection is dropped and a new one made.
        shut_down(conn)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(ping, 1.0)
        raise TimeoutError("no answer to the listener's ping")

    async def _round_trip(self, conn: psycopg.AsyncConnection, token: str) -> None:
        await conn.execute("SELECT pg_catalog.pg_notify(%s, %s)", [self._ping_channel, token])
        async for notify in conn.notifies():
            if notify.channel == CHANNEL:
                self._arrived(notify.payload)
            elif notify.payload == token:
                return
