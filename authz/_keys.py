"""API key format, hashing and verification.

A key reads ``brk_<key_id>_<secret><checksum>``:

- ``key_id``: 16 lowercase base32 characters, public, used to look the key up;
- ``secret``: 32 random bytes as 43 base62 characters, never stored;
- ``checksum``: 6 base62 characters of CRC32 over everything before it, so secret
  scanners (and our own parser) can tell a real key from a random string offline.

Only ``HMAC-SHA256(pepper, key_id ":" secret)`` is stored; verification compares in
constant time.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import zlib
from dataclasses import dataclass

PREFIX = "brk_"
_B62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_SECRET_BYTES = 32
_SECRET_LEN = 43  # ceil(256 / log2(62))
_CHECKSUM_LEN = 6
_KEY_ID_LEN = 16


class MalformedKey(ValueError):
    """The string is not a well-formed Shared Brain API key."""


@dataclass(frozen=True, slots=True)
class ParsedKey:
    key_id: str
    secret: str


def _b62(number: int, width: int) -> str:
    chars = []
    for _ in range(width):
        number, digit = divmod(number, 62)
        chars.append(_B62[digit])
    return "".join(reversed(chars))


def _checksum(body: str) -> str:
    return _b62(zlib.crc32(body.encode()), _CHECKSUM_LEN)


def new_key_id() -> str:
    """A fresh public key id."""
    return base64.b32encode(secrets.token_bytes(10)).decode().lower()


def new_secret() -> str:
    """A fresh secret of 32 random bytes in base62."""
    return _b62(int.from_bytes(secrets.token_bytes(_SECRET_BYTES), "big"), _SECRET_LEN)


def format_key(key_id: str, secret: str) -> str:
    """Assemble the full key string shown once to the admin."""
    body = f"{PREFIX}{key_id}_{secret}"
    return body + _checksum(body)


def parse_key(token: str) -> ParsedKey:
    """Split a presented key into id and secret, checking shape and checksum."""
    if not token.startswith(PREFIX):
        raise MalformedKey("missing brk_ prefix")
    rest = token[len(PREFIX) :]
    key_id, sep, tail = rest.partition("_")
    if not sep or len(key_id) != _KEY_ID_LEN or len(tail) != _SECRET_LEN + _CHECKSUM_LEN:
        raise MalformedKey("wrong shape")
    if not all(c in "abcdefghijklmnopqrstuvwxyz234567" for c in key_id):
        raise MalformedKey("bad key id")
    secret, checksum = tail[:_SECRET_LEN], tail[_SECRET_LEN:]
    if not all(c in _B62 for c in secret):
        raise MalformedKey("bad secret")
    if not hmac.compare_digest(_checksum(f"{PREFIX}{key_id}_{secret}"), checksum):
        raise MalformedKey("bad checksum")
    return ParsedKey(key_id=key_id, secret=secret)


def hash_secret(pepper: bytes, key_id: str, secret: str) -> bytes:
    """The keyed hash stored for a key: HMAC-SHA256 under the server pepper."""
    return hmac.new(pepper, f"{key_id}:{secret}".encode(), hashlib.sha256).digest()


def verify_secret(pepper: bytes, key_id: str, secret: str, stored: bytes) -> bool:
    """Constant-time comparison of a presented secret with the stored hash."""
    return hmac.compare_digest(hash_secret(pepper, key_id, secret), stored)
