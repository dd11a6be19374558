"""On a Citus cluster, a pool per worker node, so that each by-queue call goes to the node
that holds its queue.

Through the coordinator, every claim and completion batch is planned there, sent on whole
to the node that holds the queue's shards and its rows passed back: about 10 µs of the
cluster's CPU per job at the worker's batch sizes, for nothing the node could not do alone
(docs/DESIGN_DECISIONS.md 77). Sent to the node, the same ``SELECT … FROM
codity.claim_in_queue(…)`` runs there locally, the same body under the same fences.

- **Where.** ``codity.queue_nodes(worker)`` gives each served queue's node as the
  coordinator knows it (``pg_dist_node``); the worker asks again with every heartbeat, so
  a shard moved by the rebalancer is followed within a beat. Meanwhile a stale route costs
  a hop, not a wrong answer: a node that no longer holds the queue passes the call whole to
  the one that does. No rows on a single server: every call stays on the one pool.
- **Only proven nodes.** A node's pool is opened in the background and used once it has
  answered. One that cannot be reached (an address only the cluster's own network knows, a
  pg_hba.conf that refuses the worker's login) is left alone for :data:`RETRY_S`, with a
  warning, and its queues' calls go through the coordinator as before; so does every call
  of a queue whose node stopped answering. A call that was lost on a node is never resent
  here: the caller handles it as any lost call (a claim's jobs are given back, a report is
  resent, a repeat answered ``already_applied``).
- **What stays on the coordinator**: registration, heartbeats (one call for the jobs of
  every queue), the queues' limits, parents' results, and every NOTIFY, since the workers
  LISTEN there (DESIGN.md, "Room to scale out", rule 10).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from codity.db.conninfo import POOL_RECONNECT_S, on_node

__all__ = ["OPEN_TIMEOUT_S", "RETRY_S", "Node", "NodeRoutes"]

log = logging.getLogger(__name__)

Node = tuple[str, int]
OPEN_TIMEOUT_S = 10.0
"""How long a node's pool may take to open its first connection before the node is left
alone for :data:`RETRY_S`."""
RETRY_S = 60.0
"""How long a node that could not be reached, or stopped answering, is left alone."""
_POOL_SIZE = 3
"""Connections per node: the claim loop and the reporter (one call at a time each), and
the give-back of a lost claim."""


class NodeRoutes:
    """Which node holds each served queue, and the pools of the nodes that answer."""

    def __init__(self, url: str, *, enabled: bool = True) -> None:
        self._url = url
        self._enabled = enabled
        self._routes: dict[int, Node] = {}
        self._pools: dict[Node, AsyncConnectionPool[Any]] = {}
        self._opening: dict[Node, asyncio.Task[None]] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self._shunned: dict[Node, float] = {}  # node -> loop time it may be tried again

    def update(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Take the routes ``codity.queue_nodes`` gave for every queue served (rows of
        queue_id, node_host, node_port); a queue not among them is called through the
        coordinator. Opens, in the background, the pool of each node not known yet."""
        if not self._enabled:
            return
        routes = {int(r["queue_id"]): (str(r["node_host"]), int(r["node_port"]))
                  for r in rows}  # fmt: skip
        for queue_id, node in routes.items():
            was = self._routes.get(queue_id)
            if was is not None and was != node:
                log.info("queue %d moved from node %s:%d to %s:%d; its calls follow it",
                         queue_id, *was, *node)  # fmt: skip
        self._routes = routes
        now = asyncio.get_running_loop().time()
        for node in set(self._routes.values()):
            if node in self._pools or node in self._opening:
                continue
            if self._shunned.get(node, 0.0) > now:
                continue
            self._shunned.pop(node, None)
            self._opening[node] = asyncio.create_task(self._open(node))

    def pool(self, queue_id: int | None) -> AsyncConnectionPool[Any] | None:
        """The pool of the node holding ``queue_id``, or None: call the coordinator."""
        if queue_id is None:
            return None
        node = self._routes.get(queue_id)
        return None if node is None else self._pools.get(node)

    def lost(self, queue_id: int, exc: BaseException) -> None:
        """A call of ``queue_id``'s on its node went unanswered: leave that node alone for
        :data:`RETRY_S`; its queues' calls go through the coordinator meanwhile."""
        node = self._routes.get(queue_id)
        pool = None if node is None else self._pools.pop(node, None)
        if node is None or pool is None:
            return
        self._shun(node, f"a call went unanswered ({type(exc).__name__}: {exc})")
        self._close_later(pool)

    def nodes(self) -> dict[int, Node]:
        """The queues whose calls go to a node now, and that node."""
        return {q: n for q, n in self._routes.items() if n in self._pools}

    async def close(self) -> None:
        opening = list(self._opening.values())
        for task in opening:
            task.cancel()
        await asyncio.gather(*opening, return_exceptions=True)
        pools, self._pools = list(self._pools.values()), {}
        await asyncio.gather(*(p.close() for p in pools), *self._closing, return_exceptions=True)

    async def _open(self, node: Node) -> None:
        host, port = node
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            on_node(self._url, host, port),
            min_size=1,
            max_size=_POOL_SIZE,
            reconnect_timeout=POOL_RECONNECT_S,
            kwargs={"autocommit": True, "application_name": "codity-worker"},
            open=False,
        )
        try:
            await pool.open(wait=True, timeout=OPEN_TIMEOUT_S)
        except (PoolTimeout, psycopg.Error, OSError) as exc:
            await pool.close()
            self._shun(node, f"it could not be reached ({type(exc).__name__}: {exc})")
            return
        except BaseException:  # cancelled by close()
            await pool.close()
            raise
        finally:
            self._opening.pop(node, None)
        self._pools[node] = pool
        queues = sorted(q for q, n in self._routes.items() if n == node)
        log.info("the calls of queue(s) %s go to the node that holds them, %s:%d",
                 ", ".join(map(str, queues)), host, port)  # fmt: skip

    def _shun(self, node: Node, why: str) -> None:
        self._shunned[node] = asyncio.get_running_loop().time() + RETRY_S
        log.warning(
            "node %s:%d: %s; its queues' calls go through the coordinator, and the node is"
            " tried again in %gs",
            *node,
            why,
            RETRY_S,
        )

    def _close_later(self, pool: AsyncConnectionPool[Any]) -> None:
        task = asyncio.create_task(pool.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)
