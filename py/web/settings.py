"""The web app's settings, read from the environment by its entry point only.

JWT_SECRET signs access tokens (HS256, at least 32 bytes). Without it the app keeps a
random secret in CODITY_HOME/jwt_secret (created 0600 on first start), which suits the
embedded development database; a deployment sets JWT_SECRET so replicas agree.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["WebSettings", "load_web_settings"]

MIN_SECRET_BYTES = 32


@dataclass(frozen=True, slots=True)
class WebSettings:
    jwt_secret: bytes = field(repr=False)
    jwt_issuer: str = "codity"
    jwt_audience: str = "codity-api"
    access_ttl_seconds: int = 15 * 60
    refresh_ttl_seconds: int = 7 * 24 * 3600
    max_body_bytes: int = 1024 * 1024
    max_json_depth: int = 32
    auth_attempts_per_window: int = 5
    """Per client IP: failed sign-ins (login, refresh), and registrations, per window."""
    auth_account_attempts_per_window: int = 50
    """Per account, across every IP: failed logins per window (resists targeted lockout)."""
    auth_window_seconds: int = 15 * 60
    enqueues_per_minute: int = 1000
    key_reads_per_minute: int = 600
    """Per API key: GET requests per minute (429 with Retry-After past it)."""
    metrics_cache_seconds: float = 5.0
    """A project's metrics scrape is answered from one read this recent (0: every time)."""
    cors_origins: tuple[str, ...] = ()
    trusted_proxies: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
    """Peers whose X-Forwarded-For is believed; empty means the socket peer is the client."""


def _secret(env: os._Environ[str] | dict[str, str], home: Path) -> bytes:
    configured = env.get("JWT_SECRET")
    if configured:
        value = configured.encode()
        if len(value) < MIN_SECRET_BYTES:
            raise ValueError(f"JWT_SECRET must be at least {MIN_SECRET_BYTES} bytes")
        return value
    path = home / "jwt_secret"
    if not path.exists():
        home.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_urlsafe(48))
    return path.read_text().strip().encode()


def load_web_settings(home: Path, environ: dict[str, str] | None = None) -> WebSettings:
    env = os.environ if environ is None else environ
    origins = tuple(o.strip() for o in env.get("CORS_ORIGINS", "").split(",") if o.strip())
    proxies = tuple(
        ipaddress.ip_network(p.strip(), strict=False)
        for p in env.get("CODITY_TRUSTED_PROXIES", "").split(",")
        if p.strip()
    )
    return WebSettings(
        jwt_secret=_secret(env, home),
        max_body_bytes=int(env.get("CODITY_MAX_BODY_BYTES") or 1024 * 1024),
        enqueues_per_minute=int(env.get("CODITY_ENQUEUES_PER_MINUTE") or 1000),
        key_reads_per_minute=int(env.get("CODITY_KEY_READS_PER_MINUTE") or 600),
        metrics_cache_seconds=float(env.get("CODITY_METRICS_CACHE_SECONDS") or 5.0),
        cors_origins=origins,
        trusted_proxies=proxies,
    )
