"""Opaque page tokens and stream cursors, sealed to the caller they were issued to.

Every token the server issues — a page token (List, Export, ListCandidates,
ListConflicts, ListDocuments) or a sequence cursor (audit pages, Watch) — is its payload
encrypted with AES-GCM under a key derived from the server pepper and a fresh random
nonce, with its *holder* (the tenant and the principal of the calling key) as associated
data. So it reads as noise, two tokens for the same position differ (a key cannot count,
from its cursors, the events it may not see, nor tell whether any happened), and it opens
only for its holder: presented by another principal or from another tenant it fails
exactly as a forged one does. The holder is the principal, not the key, so a key rotated
for the same principal resumes from the old key's cursors. The associated data also names
the token's *kind* (the RPC that issued it, `Kind`): a ListMemories page token offered to
ListCandidates, or an audit page token offered to Watch, fails as a forged one does too.

Tokens of the previous releases are still accepted, so that a listing or a stored Watch
cursor spans an upgrade: bound to their holder but to no kind (``p…``/``c…`` sealed without
one), or unbound: a signed page token (``<base64url JSON>.<mac>``), a sealed cursor
(``s…``) and a signed bare number (``<seq>.<mac>``). Anything else — forged,
truncated, edited, another holder's, from another deployment — is INVALID_ARGUMENT naming
the field, with one message (``NOT_OURS``), before any of it is parsed or reaches SQL.
Servers that share a pepper accept each other's tokens.
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
from enum import Enum
from typing import Any, Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from brain.server.errors import InvalidArgument

MAX_TOKEN_CHARS = 1024
NOT_OURS = "is not a token this server issued"
PAGE = "p"  # a page token: "p" + base64url(nonce ‖ AES-GCM(JSON, holder))
CURSOR = "c"  # a sequence cursor: "c" + base64url(nonce ‖ AES-GCM(seq, holder))
_NONCE_BYTES = 12
_PAGE_AAD = b"brain page token v3"
_CURSOR_AAD = b"brain cursor seq v3"
_KIND_AAD = b"brain token v4"
# The previous release's formats, accepted unbound (see the module docstring).
_V2_SEALED = "s"
_V2_SEQ_AAD = b"brain cursor seq v2"
_V1_MAC_BYTES = 16


class Holder(Protocol):
    """Whom a token is issued to (a `Caller` is one)."""

    @property
    def tenant_id(self) -> str: ...

    @property
    def principal(self) -> str: ...


class Kind(Enum):
    """The RPC a token is issued by, and the only one that accepts it back."""

    MEMORIES = "ListMemories"
    EXPORT = "ExportMemories"
    CANDIDATES = "ListCandidates"
    CONFLICTS = "ListConflicts"
    DOCUMENTS = "ListDocuments"
    AUDIT = "ListAuditEvents"
    WATCH = "WatchMemories"


def _bound(purpose: bytes, holder: Holder) -> bytes:
    """The associated data of a token: what it is for and whose it is, unambiguously."""
    return purpose + b"\0" + json.dumps([holder.tenant_id, holder.principal]).encode()


def _kind_bound(kind: Kind, holder: Holder) -> bytes:
    return _bound(_KIND_AAD + b"\0" + kind.value.encode(), holder)


def _b64decode(body: str) -> bytes:
    return base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))


class Tokens:
    """Seals and opens page tokens and cursors under keys derived from the pepper."""

    def __init__(self, pepper: bytes) -> None:
        self._seal = AESGCM(hmac.new(pepper, b"brain tokens v3", hashlib.sha256).digest())
        self._v1_mac = hmac.new(pepper, b"brain page tokens v1", hashlib.sha256).digest()
        self._v2_seal = AESGCM(hmac.new(pepper, b"brain cursors v2", hashlib.sha256).digest())

    def _sealed(self, prefix: str, aad: bytes, plain: bytes) -> str:
        nonce = secrets.token_bytes(_NONCE_BYTES)
        sealed = self._seal.encrypt(nonce, plain, aad)
        return prefix + base64.urlsafe_b64encode(nonce + sealed).decode().rstrip("=")

    def _v1_payload(self, field: str, token: str) -> str:
        """The payload of a previous release's signed token (``<payload>.<mac>``)."""
        payload, _, mac = token.rpartition(".")
        digest = hmac.new(self._v1_mac, payload.encode(), hashlib.sha256).digest()
        expected = base64.urlsafe_b64encode(digest[:_V1_MAC_BYTES]).decode().rstrip("=")
        if not payload or not hmac.compare_digest(mac.encode(), expected.encode()):
            raise InvalidArgument(field, NOT_OURS)
        return payload

    def _open_bound(self, field: str, body: str, kind: Kind, holder: Holder, old: bytes) -> bytes:
        """A token of ``kind`` sealed for ``holder``, or one sealed for it by the release
        before kinds (associated data ``old``)."""
        try:
            return _open_sealed(self._seal, field, body, _kind_bound(kind, holder))
        except InvalidArgument:
            return _open_sealed(self._seal, field, body, _bound(old, holder))

    def encode(self, holder: Holder, data: dict[str, Any], *, kind: Kind) -> str:
        """A page token of ``kind`` for ``holder``: opaque, new at every call, opened only
        by it and only by that RPC."""
        raw = json.dumps(data, separators=(",", ":"), sort_keys=True).encode()
        return self._sealed(PAGE, _kind_bound(kind, holder), raw)

    def decode(self, holder: Holder, field: str, token: str, *, kind: Kind) -> dict[str, Any]:
        """The payload of a page token of ``kind`` issued to ``holder`` (or one of a
        previous release); INVALID_ARGUMENT for anything else."""
        _check_shape(field, token)
        try:
            if "." in token:  # base64url has no "."; a previous release's signed token
                raw = _b64decode(self._v1_payload(field, token))
            elif token.startswith(PAGE):
                raw = self._open_bound(field, token[1:], kind, holder, _PAGE_AAD)
            else:
                raise InvalidArgument(field, NOT_OURS)
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            raise InvalidArgument(field, NOT_OURS) from None
        if not isinstance(data, dict):
            raise InvalidArgument(field, NOT_OURS)
        return data

    def encode_seq(self, holder: Holder, seq: int, *, kind: Kind) -> str:
        """A sequence cursor of ``kind`` (audit pages, Watch) for ``holder``: opaque, new
        at every call."""
        return self._sealed(CURSOR, _kind_bound(kind, holder), seq.to_bytes(8, "big"))

    def decode_seq(self, holder: Holder, field: str, token: str, *, kind: Kind) -> int:
        """The sequence number of a cursor of ``kind`` issued to ``holder`` (or one of a
        previous release); empty means the start (0)."""
        if not token:
            return 0
        _check_shape(field, token)
        if "." in token:  # a previous release's signed bare number
            payload = self._v1_payload(field, token)
            if not payload.isdigit() or len(payload) > 18:
                raise InvalidArgument(field, NOT_OURS)
            return int(payload)
        if token.startswith(CURSOR):
            raw = self._open_bound(field, token[1:], kind, holder, _CURSOR_AAD)
        elif token.startswith(_V2_SEALED):
            raw = _open_sealed(self._v2_seal, field, token[1:], _V2_SEQ_AAD)
        else:
            raise InvalidArgument(field, NOT_OURS)
        if len(raw) != 8:
            raise InvalidArgument(field, NOT_OURS)
        return int.from_bytes(raw, "big")


def _check_shape(field: str, token: str) -> None:
    if len(token) > MAX_TOKEN_CHARS or not token.isascii():
        raise InvalidArgument(field, NOT_OURS)


def _open_sealed(seal: AESGCM, field: str, body: str, aad: bytes) -> bytes:
    try:
        raw = _b64decode(body)
        return seal.decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], aad)
    except (ValueError, InvalidTag):
        raise InvalidArgument(field, NOT_OURS) from None


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
