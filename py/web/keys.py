"""API keys: 32 random bytes, shown once, kept only as a SHA-256 and a display prefix.

A key reads ``cdy_`` followed by 43 URL-safe characters. SHA-256 (not argon2) is right
here: the secret has 256 bits of entropy, so there is nothing to brute-force, and every
request must look the key up by its hash.
"""

from __future__ import annotations

import hashlib
import secrets

__all__ = ["KEY_PREFIX", "display_prefix", "hash_key", "new_key"]

KEY_PREFIX = "cdy_"
_DISPLAY_CHARS = 12


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_key(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def display_prefix(key: str) -> str:
    """What lists show, enough to tell keys apart and nothing to authenticate with."""
    return key[:_DISPLAY_CHARS]
