"""Which addresses the ``http_request`` handler may connect to.

A job's URL comes from whoever enqueued it, so the worker must not become a way into the
network it runs in. The rules (the seed's Security section):

- the host name is resolved once, and **every** address it resolves to is checked: one
  private address among public ones fails the request (DNS rebinding);
- the connection then goes to an address that was checked, never through a second lookup;
- refused: private (10/8, 172.16/12, 192.168/16, fc00::/7), loopback, link-local
  (169.254/16, fe80::/10, which holds the cloud metadata address 169.254.169.254),
  CGNAT (100.64/10), multicast, reserved, unspecified, benchmarking and documentation
  ranges, and the well-known metadata addresses of other clouds (fd00:ec2::254,
  100.100.100.200); IPv4-mapped (::ffff:a.b.c.d), IPv4-compatible, NAT64 (64:ff9b::/96)
  and 6to4 (2002::/16) IPv6 forms are unwrapped and judged as the IPv4 address inside;
- HTTP_HANDLER_ALLOWLIST (comma-separated) restricts which hosts may be named at all:
  ``api.example.com``, ``*.example.com`` (sub-domains only), or a network in CIDR form
  (``10.20.0.0/16``), which also lets an operator open one private range on purpose —
  but never a metadata address.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass

__all__ = ["Allowlist", "BlockedDestination", "check_address", "resolve_checked"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_METADATA = {
    ipaddress.ip_address("169.254.169.254"),
    ipaddress.ip_address("100.100.100.200"),
    ipaddress.ip_address("fd00:ec2::254"),
}
_EXTRA_BLOCKED = [
    ipaddress.ip_network(n)
    for n in (
        "0.0.0.0/8",
        "100.64.0.0/10",
        "192.0.0.0/24",
        "192.0.2.0/24",
        "198.18.0.0/15",
        "198.51.100.0/24",
        "203.0.113.0/24",
        "240.0.0.0/4",
        "255.255.255.255/32",
        "64:ff9b:1::/48",
        "2001:db8::/32",
    )
]
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


class BlockedDestination(Exception):
    """The URL's host is not allowed, or resolves to an address the worker must not reach."""


def _embedded_ipv4(addr: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    if addr.sixtofour is not None:
        return addr.sixtofour
    if addr in _NAT64:
        return ipaddress.IPv4Address(int(addr) & 0xFFFF_FFFF)
    if int(addr) >> 32 == 0 and int(addr) > 1:  # IPv4-compatible ::a.b.c.d (deprecated)
        return ipaddress.IPv4Address(int(addr) & 0xFFFF_FFFF)
    return None


def _is_metadata(addr: IPAddress) -> bool:
    if isinstance(addr, ipaddress.IPv6Address):
        inner = _embedded_ipv4(addr)
        if inner is not None:
            return inner in _METADATA
    return addr in _METADATA


def check_address(addr: IPAddress) -> str | None:
    """Why this address may not be reached, or None when it may."""
    if isinstance(addr, ipaddress.IPv6Address):
        inner = _embedded_ipv4(addr)
        if inner is not None:
            reason = check_address(inner)
            return f"{reason} (inside {addr})" if reason else None
    if addr in _METADATA:
        return f"{addr} is a cloud metadata address"
    for label, flag in (
        ("unspecified", addr.is_unspecified),
        ("loopback", addr.is_loopback),
        ("link-local", addr.is_link_local),
        ("multicast", addr.is_multicast),
        ("private", addr.is_private),
        ("reserved", addr.is_reserved),
    ):
        if flag:
            return f"{addr} is a {label} address"
    for network in _EXTRA_BLOCKED:
        if addr.version == network.version and addr in network:
            return f"{addr} is in the non-public range {network}"
    if not addr.is_global:
        return f"{addr} is not a public address"
    return None


@dataclass(frozen=True)
class Allowlist:
    hosts: frozenset[str] = frozenset()
    suffixes: tuple[str, ...] = ()
    networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> Allowlist:
        hosts: set[str] = set()
        suffixes: list[str] = []
        networks = []
        for raw in (text or "").split(","):
            entry = raw.strip().lower()
            if not entry:
                continue
            if entry.startswith("*."):
                suffixes.append(entry[1:])
                continue
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                hosts.add(entry.rstrip("."))
        return cls(frozenset(hosts), tuple(suffixes), tuple(networks))

    @property
    def is_empty(self) -> bool:
        return not (self.hosts or self.suffixes or self.networks)

    def allows_host(self, host: str) -> bool:
        host = host.lower().rstrip(".")
        if self.is_empty or host in self.hosts:
            return True
        if any(host.endswith(s) for s in self.suffixes):
            return True
        try:
            addr = ipaddress.ip_address(host)
        except ValueError:
            return False
        return self.opens(addr)

    def opens(self, addr: IPAddress) -> bool:
        """True when the operator opened this address's network on purpose."""
        return any(addr.version == n.version and addr in n for n in self.networks)


def resolve_checked(host: str, port: int, allowlist: Allowlist) -> list[IPAddress]:
    """Resolve ``host`` once and return its addresses, all checked; raise when any is refused."""
    if not allowlist.allows_host(host):
        raise BlockedDestination(f"host {host!r} is not in HTTP_HANDLER_ALLOWLIST")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise BlockedDestination(f"cannot resolve {host!r}: {exc.strerror}") from exc
    addresses: list[IPAddress] = []
    for info in infos:
        addr = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if addr not in addresses:
            addresses.append(addr)
    if not addresses:
        raise BlockedDestination(f"{host!r} resolves to no address")
    for addr in addresses:
        # An opened network never opens a metadata address: credentials live there.
        opened = allowlist.opens(addr) and not _is_metadata(addr)
        reason = None if opened else check_address(addr)
        if reason:
            raise BlockedDestination(f"{host!r} resolves to a refused address: {reason}")
    return addresses
