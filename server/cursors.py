"""Opaque page tokens and stream cursors (base64url JSON; tampering gives INVALID_ARGUMENT)."""

from __future__ import annotations

import base64
import json
import secrets
import time
import uuid
from datetime import datetime
from typing import Any

from .errors import InvalidArgument


def encode(data: dict[str, Any]) -> str:
    raw = json.dumps(data, separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode(field: str, token: str) -> dict[str, Any]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise InvalidArgument(field, "is not a token this server issued") from None
    if not isinstance(data, dict):
        raise InvalidArgument(field, "is not a token this server issued")
    return data


def get_uuid(field: str, data: dict[str, Any], name: str) -> uuid.UUID:
    try:
        return uuid.UUID(str(data[name]))
    except (KeyError, ValueError):
        raise InvalidArgument(field, "is not a token this server issued") from None


def get_time(field: str, data: dict[str, Any], name: str) -> datetime:
    try:
        return datetime.fromisoformat(str(data[name]))
    except (KeyError, ValueError):
        raise InvalidArgument(field, "is not a token this server issued") from None


def get_int(field: str, data: dict[str, Any], name: str) -> int:
    value = data.get(name)
    if not isinstance(value, int):
        raise InvalidArgument(field, "is not a token this server issued")
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
