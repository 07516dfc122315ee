"""Tokens in the formats of the release before tokens were bound to their holder, built
here as that release built them: what a client holds while a deployment upgrades (a
stored Watch cursor, a listing in the middle of its pages)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from typing import Any

from cryptography.hazmat.primitives.ciphers.aead import AESGCM


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def signed(pepper: bytes, payload: str) -> str:
    """``<payload>.<mac>``: a page token's base64url JSON, or (earlier) a bare seq number."""
    key = hmac.new(pepper, b"brain page tokens v1", hashlib.sha256).digest()
    return f"{payload}.{_b64(hmac.new(key, payload.encode(), hashlib.sha256).digest()[:16])}"


def page_token(pepper: bytes, data: dict[str, Any]) -> str:
    """A signed, readable, unbound page token."""
    return signed(pepper, _b64(json.dumps(data, separators=(",", ":"), sort_keys=True).encode()))


def sealed_cursor(pepper: bytes, seq: int) -> str:
    """``s…``: an audit page token or Watch cursor sealed with AES-GCM, unbound."""
    seal = AESGCM(hmac.new(pepper, b"brain cursors v2", hashlib.sha256).digest())
    nonce = secrets.token_bytes(12)
    return "s" + _b64(nonce + seal.encrypt(nonce, seq.to_bytes(8, "big"), b"brain cursor seq v2"))


def _holder_bound(purpose: bytes, holder: Any) -> bytes:
    return purpose + b"\0" + json.dumps([holder.tenant_id, holder.principal]).encode()


def _sealed_v3(pepper: bytes, prefix: str, aad: bytes, plain: bytes) -> str:
    seal = AESGCM(hmac.new(pepper, b"brain tokens v3", hashlib.sha256).digest())
    nonce = secrets.token_bytes(12)
    return prefix + _b64(nonce + seal.encrypt(nonce, plain, aad))


def holder_page_token(pepper: bytes, holder: Any, data: dict[str, Any]) -> str:
    """``p…``: a page token sealed for its holder, for no RPC in particular (the release
    before tokens named the RPC that issued them)."""
    raw = json.dumps(data, separators=(",", ":"), sort_keys=True).encode()
    return _sealed_v3(pepper, "p", _holder_bound(b"brain page token v3", holder), raw)


def holder_cursor(pepper: bytes, holder: Any, seq: int) -> str:
    """``c…``: an audit page token or Watch cursor sealed for its holder, for no RPC in
    particular."""
    aad = _holder_bound(b"brain cursor seq v3", holder)
    return _sealed_v3(pepper, "c", aad, seq.to_bytes(8, "big"))
