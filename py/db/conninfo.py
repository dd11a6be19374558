"""How every Codity process connects: DATABASE_URL plus the settings that make failover fast.

A user gives one URL, for one server or several (``postgresql://a:5432,b:5432/codity``, or
``host=a,b port=5432,5432 dbname=codity``): the hosts of a pg_auto_failover or Patroni
pair, or one proxy endpoint. libpq tries the hosts in order. Left to its defaults, a
connection attempt to a host that is gone waits about 130 s (psycopg's default when no
``connect_timeout`` is set), and a connection whose server vanished without a word stays
open until the kernel gives up, which can take many minutes. So each process adds, unless
the URL (or libpq's environment variable) already says otherwise:

``connect_timeout=5``
    seconds per host and attempt (psycopg's minimum is 2);
``keepalives=1 keepalives_idle=5 keepalives_interval=2 keepalives_count=3``
    an idle connection whose peer is gone is found out in about 11 s;
``tcp_user_timeout=10000``
    unacknowledged data gives the connection up after 10 s;
``target_session_attrs=read-write``
    with more than one host only: a standby (read-only) is skipped, so a process lands
    on the primary after a failover. With one host nothing is added: a proxy or a single
    server is taken as it is, and a process that finds it read-only waits (SQLSTATE 25006
    is retried like a lost connection, codity.db.errors.TRANSIENT).

docs/RUNBOOK.md, "High availability", has the set-ups and what each process does.
"""

from __future__ import annotations

import os
from typing import Any

from psycopg.conninfo import conninfo_to_dict, make_conninfo

__all__ = ["DEFAULTS", "POOL_RECONNECT_S", "conninfo", "hosts", "on_node"]

DEFAULTS: dict[str, str] = {
    "connect_timeout": "5",
    "keepalives": "1",
    "keepalives_idle": "5",
    "keepalives_interval": "2",
    "keepalives_count": "3",
    "tcp_user_timeout": "10000",
}
POOL_RECONNECT_S = 2.0
"""A pool's ``reconnect_timeout``: how long it keeps trying to replace a lost connection on
its own before giving the slot up, to be opened again at the next checkout. psycopg_pool
waits 1 s after a failed attempt and doubles the wait each time, with no cap but this
timeout (5 min by default): after a 10 s outage its next attempt came up to 5 s after the
database was back, and from outside the workers completed their first job 3.9 to 5.7 s after
writes were accepted again (issue 25). With 2 s the waits stay under a second, and a
checkout that finds no connection starts a new attempt at once."""
# libpq reads these from the environment when the URL does not set them: a user who set
# one there means it, so no default is added over it.
_ENVIRONMENT = {"connect_timeout": "PGCONNECT_TIMEOUT",
                "target_session_attrs": "PGTARGETSESSIONATTRS"}  # fmt: skip


def hosts(url: str) -> list[str]:
    """The hosts a URL or connection string names, in order ([] for the default host)."""
    return _hosts(conninfo_to_dict(url))


def _hosts(params: dict[str, Any]) -> list[str]:
    return [h for h in str(params.get("host") or "").split(",") if h]


def conninfo(url: str, **extra: Any) -> str:
    """``url`` as a connection string with the module's defaults added, then ``extra``
    (``application_name=…``, never overridden by the defaults). Raises
    psycopg.ProgrammingError for a string libpq cannot parse."""
    params: dict[str, Any] = conninfo_to_dict(url)
    for name, value in DEFAULTS.items():
        if name not in params and not os.environ.get(_ENVIRONMENT.get(name, "")):
            params[name] = value
    if (
        len(_hosts(params)) > 1
        and "target_session_attrs" not in params
        and not os.environ.get(_ENVIRONMENT["target_session_attrs"])
    ):
        params["target_session_attrs"] = "read-write"
    params.update(extra)
    return make_conninfo("", **params)


def on_node(url: str, host: str, port: int, **extra: Any) -> str:
    """:func:`conninfo` of ``url`` pointed at one server, ``host``:``port`` (a Citus worker
    node, codity.worker.node_routes): the same login, database and settings, its one host
    in place of the URL's (an address the URL pinned, ``hostaddr``, dropped with them)."""
    params: dict[str, Any] = conninfo_to_dict(conninfo(url, **extra))
    params.pop("hostaddr", None)
    params.pop("target_session_attrs", None)
    params.update(host=host, port=str(port))
    return make_conninfo("", **params)
