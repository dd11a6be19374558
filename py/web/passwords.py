"""Passwords: argon2id at OWASP's floor or above, checked in a worker thread.

Parameters are named constants (m = 19456 KiB, t = 2, p = 1: OWASP's first argon2id row).
A stored hash made with other parameters still verifies, and ``needs_rehash`` tells the
login to replace it, so raising the constants upgrades every account at its next sign-in.

Hashing is deliberately slow and CPU-bound; the ``*_async`` functions run it in a thread so
the event loop keeps serving other requests meanwhile. ``verify_password`` with no stored
hash (unknown email) still verifies against a dummy hash, so the answer takes as long for
an email that does not exist as for a wrong password: timing does not reveal accounts.
The length cap bounds the work one request can ask for.
"""

from __future__ import annotations

import contextlib
import functools

import anyio.to_thread
from argon2 import PasswordHasher, Type
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

__all__ = [
    "MAX_PASSWORD_LENGTH",
    "MEMORY_COST_KIB",
    "MIN_PASSWORD_LENGTH",
    "PARALLELISM",
    "TIME_COST",
    "hash_password",
    "hash_password_async",
    "needs_rehash",
    "verify_password",
    "verify_password_async",
]

MEMORY_COST_KIB = 19456
TIME_COST = 2
PARALLELISM = 1
MIN_PASSWORD_LENGTH = 12
MAX_PASSWORD_LENGTH = 256

_HASHER = PasswordHasher(
    time_cost=TIME_COST,
    memory_cost=MEMORY_COST_KIB,
    parallelism=PARALLELISM,
    hash_len=32,
    salt_len=16,
    type=Type.ID,
)


@functools.cache
def _dummy_hash() -> str:
    """A hash of nothing anyone knows, made once, to spend the same time on unknown emails."""
    return _HASHER.hash("codity-dummy-password-for-timing")


def hash_password(password: str) -> str:
    """An argon2id hash (PHC string, salt included) of ``password``."""
    return _HASHER.hash(password)


def verify_password(stored: str | None, password: str) -> bool:
    """Whether ``password`` matches ``stored``. With no usable stored hash, a dummy one is
    verified instead (and the answer is False), so the time spent is the same."""
    try:
        if stored is not None and stored.startswith("$argon2"):
            return _HASHER.verify(stored, password)
    except VerifyMismatchError:
        return False
    except (VerificationError, InvalidHashError):
        pass
    with contextlib.suppress(VerificationError, InvalidHashError):
        _HASHER.verify(_dummy_hash(), password)
    return False


def needs_rehash(stored: str) -> bool:
    """Whether ``stored`` was made with parameters other than today's (call after a match)."""
    try:
        return _HASHER.check_needs_rehash(stored)
    except InvalidHashError:
        return True


async def hash_password_async(password: str) -> str:
    return await anyio.to_thread.run_sync(hash_password, password)


async def verify_password_async(stored: str | None, password: str) -> bool:
    return await anyio.to_thread.run_sync(verify_password, stored, password)
