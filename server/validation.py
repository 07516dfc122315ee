"""Checks on caller input. Each failure names the field; nothing is written before them."""

from __future__ import annotations

import unicodedata
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime

from google.protobuf.timestamp_pb2 import Timestamp

from brain.authz import is_valid_name

from .errors import InvalidArgument

MAX_CONTENT_BYTES = 32 * 1024
MAX_TAGS = 32
MAX_METADATA_ENTRIES = 32
MAX_METADATA_VALUE = 1024
MAX_LABELS = 16
MAX_QUERY_CHARS = 2000


def content(field: str, value: str, *, required: bool = True) -> str:
    """Non-empty UTF-8 text without NUL bytes, within the size limit."""
    if "\x00" in value:
        raise InvalidArgument(field, "must not contain NUL bytes")
    if required and not value.strip():
        raise InvalidArgument(field, "must not be empty")
    size = len(value.encode())
    if size > MAX_CONTENT_BYTES:
        raise InvalidArgument(
            field, f"is {size} bytes; the limit is {MAX_CONTENT_BYTES} bytes (32 KiB)"
        )
    return value


def text(field: str, value: str, *, limit: int = 256) -> str:
    if "\x00" in value:
        raise InvalidArgument(field, "must not contain NUL bytes")
    if len(value) > limit:
        raise InvalidArgument(field, f"is longer than {limit} characters")
    return value


def name(field: str, value: str, *, required: bool = False) -> str:
    """A user id, namespace, session id or label."""
    if not value:
        if required:
            raise InvalidArgument(field, "is required")
        return value
    if not is_valid_name(value):
        raise InvalidArgument(
            field,
            "must be 1-128 characters of letters, digits and . _ : @ / + -, "
            "starting with a letter or digit",
        )
    return value


def names(field: str, values: Iterable[str], *, limit: int) -> list[str]:
    out = sorted(set(values))
    if len(out) > limit:
        raise InvalidArgument(field, f"at most {limit} entries")
    for value in out:
        name(field, value, required=True)
    return out


def tags(field: str, values: Iterable[str]) -> list[str]:
    out = sorted({text(field, v, limit=64).strip() for v in values} - {""})
    if len(out) > MAX_TAGS:
        raise InvalidArgument(field, f"at most {MAX_TAGS} tags")
    return out


def metadata(field: str, values: dict[str, str]) -> dict[str, str]:
    if len(values) > MAX_METADATA_ENTRIES:
        raise InvalidArgument(field, f"at most {MAX_METADATA_ENTRIES} entries")
    for k, v in values.items():
        text(f"{field} key", k, limit=64)
        text(f"{field}[{k}]", v, limit=MAX_METADATA_VALUE)
    return dict(values)


def unit_interval(field: str, value: float) -> float:
    if not 0.0 <= value <= 1.0:
        raise InvalidArgument(field, "must be between 0 and 1")
    return value


def memory_id(field: str, value: str) -> uuid.UUID:
    if not value:
        raise InvalidArgument(field, "is required")
    try:
        return uuid.UUID(value)
    except ValueError:
        raise InvalidArgument(field, "is not a memory id (a UUID)") from None


def timestamp(ts: Timestamp | None, present: bool) -> datetime | None:
    """A protobuf Timestamp (if set) as an aware datetime."""
    if not present or ts is None:
        return None
    return ts.ToDatetime(tzinfo=UTC)


def query(field: str, value: str) -> str:
    text(field, value, limit=MAX_QUERY_CHARS)
    if not value.strip():
        raise InvalidArgument(field, "must not be empty")
    return value


def normalise(value: str) -> str:
    """The form a value is fingerprinted in: NFKC, case-folded, whitespace collapsed."""
    return " ".join(unicodedata.normalize("NFKC", value).casefold().split())
