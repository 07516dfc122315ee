"""Opaque page tokens and stream cursors, signed so that only this deployment can open them.

A page token is ``<payload>.<mac>``: the payload is base64url JSON and the mac an
HMAC-SHA256 under a key derived from the server pepper. A sequence cursor (audit pages,
Watch) is sealed instead: the tenant's audit seq encrypted with AES-GCM under another
key derived from the pepper and a fresh random nonce, so it reads as noise and two
cursors for the same position differ — a key cannot count, from its cursors, the events
it may not see, nor tell whether any happened. Cursors of earlier releases (a signed
bare number) are still accepted. Anything else — forged, truncated, from another
deployment — is INVALID_ARGUMENT naming the field, before any of it is parsed or
reaches SQL. Servers that share a pepper accept each other's tokens.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
import uuid
from datetime import datetime
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from brain.server.errors import InvalidArgument

MAX_TOKEN_CHARS = 1024
MAC_BYTES = 16
NOT_OURS = "is not a token this server issued"
SEALED = "s"  # a sealed cursor: "s" + base64url(nonce ‖ AES-GCM(seq))
_NONCE_BYTES = 12
_SEQ = b"brain cursor seq v2"


class Tokens:
    """Signs and opens page tokens and cursors under a key derived from the pepper."""

    def __init__(self, pepper: bytes) -> None:
        self._key = hmac.new(pepper, b"brain page tokens v1", hashlib.sha256).digest()
        self._seal = AESGCM(hmac.new(pepper, b"brain cursors v2", hashlib.sha256).digest())

    def _mac(self, payload: str) -> str:
        digest = hmac.new(self._key, payload.encode(), hashlib.sha256).digest()[:MAC_BYTES]
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")

    def sign(self, payload: str) -> str:
        return f"{payload}.{self._mac(payload)}"

    def open(self, field: str, token: str) -> str:
        """The payload of a token this server signed; INVALID_ARGUMENT for anything else."""
        payload, dot, mac = token.rpartition(".")
        if len(token) > MAX_TOKEN_CHARS or not dot or not payload.isascii():
            raise InvalidArgument(field, NOT_OURS)
        if not hmac.compare_digest(mac.encode(), self._mac(payload).encode()):
            raise InvalidArgument(field, NOT_OURS)
        return payload

    def encode(self, data: dict[str, Any]) -> str:
        raw = json.dumps(data, separators=(",", ":"), sort_keys=True).encode()
        return self.sign(base64.urlsafe_b64encode(raw).decode().rstrip("="))

    def decode(self, field: str, token: str) -> dict[str, Any]:
        payload = self.open(field, token)
        try:
            data = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        except (ValueError, UnicodeDecodeError):
            raise InvalidArgument(field, NOT_OURS) from None
        if not isinstance(data, dict):
            raise InvalidArgument(field, NOT_OURS)
        return data

    def encode_seq(self, seq: int) -> str:
        """A sealed sequence cursor (audit pages, Watch): opaque, and new at every call."""
        nonce = secrets.token_bytes(_NONCE_BYTES)
        sealed = self._seal.encrypt(nonce, seq.to_bytes(8, "big"), _SEQ)
        return SEALED + base64.urlsafe_b64encode(nonce + sealed).decode().rstrip("=")

    def decode_seq(self, field: str, token: str) -> int:
        """The sequence number of a cursor; empty means the start (0)."""
        if not token:
            return 0
        if len(token) > MAX_TOKEN_CHARS or not token.isascii():
            raise InvalidArgument(field, NOT_OURS)
        if "." in token:  # an earlier release's signed number
            payload = self.open(field, token)
            if not payload.isdigit() or len(payload) > 18:
                raise InvalidArgument(field, NOT_OURS)
            return int(payload)
        if not token.startswith(SEALED):
            raise InvalidArgument(field, NOT_OURS)
        body = token[len(SEALED) :]
        try:
            raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
            seq = self._seal.decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], _SEQ)
        except (ValueError, InvalidTag):
            raise InvalidArgument(field, NOT_OURS) from None
        if len(seq) != 8:
            raise InvalidArgument(field, NOT_OURS)
        return int.from_bytes(seq, "big")


def get_uuid(field: str, data: dict[str, Any], name: str) -> uuid.UUID:
    try:
        return uuid.UUID(str(data[name]))
    except (KeyError, ValueError):
        raise InvalidArgument(field, NOT_OURS) from None


def get_time(field: str, data: dict[str, Any], name: str) -> datetime:
    try:
        return datetime.fromisoformat(str(data[name]))
    except (KeyError, ValueError):
        raise InvalidArgument(field, NOT_OURS) from None


def get_int(field: str, data: dict[str, Any], name: str) -> int:
    value = data.get(name)
    if not isinstance(value, int):
        raise InvalidArgument(field, NOT_OURS)
    return value


def uuid7() -> uuid.UUID:
    """A time-ordered UUID (RFC 9562 version 7): ids sort by creation time."""
    ms = time.time_ns() // 1_000_000
    rand = secrets.randbits(74)
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= ((rand >> 62) & 0xFFF) << 64
    value |= 0b10 << 62
    value |= rand & ((1 << 62) - 1)
    return uuid.UUID(int=value)
