"""Who may do what: the route scopes, the membership roles and the rate-limit classes.

Kept apart from ``codity.web.endpoint`` (a route as data) and ``codity.web.call`` (what a
handler receives), which both need these names: with them in either module, the two
imported each other.
"""

from __future__ import annotations

import enum

__all__ = ["Limit", "Role", "Scope"]


class Scope(enum.Enum):
    PUBLIC = "public"
    """No credential."""
    AUTHENTICATED = "authenticated"
    """A signed-in user (access token); no tenant context beyond the user's own rows."""
    PROJECT = "project"
    """A credential for one project; the guard sets the tenant and checks the role."""


class Role(enum.IntEnum):
    VIEWER = 1
    MEMBER = 2
    ADMIN = 3
    OWNER = 4

    @classmethod
    def parse(cls, name: str) -> Role:
        return cls[name.upper()]

    @property
    def label(self) -> str:
        return self.name.lower()


class Limit(enum.Enum):
    AUTH = "auth"
    """Registration, charged by the mount per client IP and per email: 5 per 15 minutes."""
    SIGN_IN = "sign-in"
    """Failed sign-ins, counted by the handler itself (codity.web.ratelimit): 5 per client IP
    and 50 per account across IPs, per 15 minutes; a success gives its hit back."""
    ENQUEUE = "enqueue"
    """Counted per project, one per job: 1,000 per minute."""
