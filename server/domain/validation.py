"""Checks on caller input. Each failure names the field; nothing is written before them."""

from __future__ import annotations

import unicodedata
import uuid
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp

from brain.authz import is_valid_name
from brain.server.errors import InvalidArgument

MAX_CONTENT_BYTES = 32 * 1024
MAX_TAGS = 32
MAX_FILTER_VALUES = 64  # tags or kinds a filter may list
MAX_METADATA_ENTRIES = 32
MAX_METADATA_VALUE = 1024
MAX_LABELS = 16
MAX_QUERY_CHARS = 2000
# The longest review window (review_within, or a namespace's candidate TTL standing in for
# it) by default: brain-server --max-candidate-ttl-days; brain-admin holds policies to it.
MAX_CANDIDATE_TTL = timedelta(days=30)
# A short text field unless it says otherwise: a principal, and the filters that name one
# (created_by, proposed_by, the audit log's principal). brain-admin holds principals to it.
MAX_TEXT_CHARS = 256

# The range protobuf's well-known types allow (RFC 3339 years 1 to 9999; ±10,000 years).
MIN_TIMESTAMP_SECONDS = -62_135_596_800  # 0001-01-01T00:00:00Z
MAX_TIMESTAMP_SECONDS = 253_402_300_799  # 9999-12-31T23:59:59Z
MAX_DURATION_SECONDS = 315_576_000_000
NANOS_PER_SECOND = 1_000_000_000


def visible(text: str) -> bool:
    """Whether ``text`` holds a character that shows: not whitespace, a format
    (zero-width, bidi) or control character, or an unassigned or private-use code point."""
    return any(not c.isspace() and unicodedata.category(c) not in _INVISIBLE for c in text)


_INVISIBLE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn"})


def content(field: str, value: str, *, required: bool = True) -> str:
    """Non-empty UTF-8 text without NUL bytes, within the size limit; text of only
    zero-width or other invisible characters is empty."""
    if "\x00" in value:
        raise InvalidArgument(field, "must not contain NUL bytes")
    if required and not visible(value):
        raise InvalidArgument(field, "must not be empty")
    size = len(value.encode())
    if size > MAX_CONTENT_BYTES:
        raise InvalidArgument(
            field, f"is {size} bytes; the limit is {MAX_CONTENT_BYTES} bytes (32 KiB)"
        )
    return value


def text(field: str, value: str, *, limit: int = MAX_TEXT_CHARS) -> str:
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
    given = list(values)
    out = sorted(set(given))
    if len(out) > limit:
        raise InvalidArgument(field, f"at most {limit} entries")
    for index, value in enumerate(given):  # the caller's own index names a bad entry
        name(f"{field}[{index}]", value, required=True)
    return out


def capped(field: str, values: Sequence[str], limit: int = MAX_FILTER_VALUES) -> Sequence[str]:
    """A filter's list of values, refused past ``limit`` (a save holds at most 32 tags; a
    filter of thousands only costs the database)."""
    if len(values) > limit:
        raise InvalidArgument(field, f"at most {limit} values")
    return values


def tags(field: str, values: Iterable[str]) -> list[str]:
    out = sorted({text(field, v, limit=64).strip() for v in values} - {""})
    if len(out) > MAX_TAGS:
        raise InvalidArgument(field, f"at most {MAX_TAGS} tags")
    return out


def metadata(field: str, values: dict[str, str]) -> dict[str, str]:
    if len(values) > MAX_METADATA_ENTRIES:
        raise InvalidArgument(field, f"at most {MAX_METADATA_ENTRIES} entries")
    for k, v in values.items():
        if not k.strip():
            raise InvalidArgument(f"{field} key", "must not be empty")
        text(f"{field} key", k, limit=64)
        text(f"{field}[{k}]", v, limit=MAX_METADATA_VALUE)
    return dict(values)


def unit_interval(field: str, value: float) -> float:
    if not 0.0 <= value <= 1.0:
        raise InvalidArgument(field, "must be between 0 and 1")
    return value


def memory_id(field: str, value: str, what: str = "memory") -> uuid.UUID:
    """A UUID naming a ``what`` (a memory, by default; a conflict, ...)."""
    if not value:
        raise InvalidArgument(field, "is required")
    try:
        return uuid.UUID(value)
    except ValueError:
        raise InvalidArgument(field, f"is not a {what} id (a UUID)") from None


def well_formed(message: Message, path: str = "") -> None:
    """Refuse what no field of any request may hold, whatever the RPC: NUL bytes in
    strings (PostgreSQL refuses them) and timestamps or durations outside protobuf's range.
    Runs on every request before authorization reads it; each RPC checks its own rules."""
    for fd, value in message.ListFields():
        name = f"{path}{fd.name}"
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            value_fd = fd.message_type.fields_by_name["value"]
            for key, item in value.items():
                _well_formed_value(fd.message_type.fields_by_name["key"], f"{name} key", key)
                _well_formed_value(value_fd, f"{name}[{key}]", item)
        elif fd.is_repeated:
            for i, item in enumerate(value):
                _well_formed_value(fd, f"{name}[{i}]", item)
        else:
            _well_formed_value(fd, name, value)


def _well_formed_value(fd: FieldDescriptor, name: str, value: object) -> None:
    if isinstance(value, str):
        if "\x00" in value:
            raise InvalidArgument(name, "must not contain NUL bytes")
    elif isinstance(value, Message):
        kind = value.DESCRIPTOR.full_name
        if kind == "google.protobuf.Timestamp":
            _timestamp_in_range(name, value)
        elif kind == "google.protobuf.Duration":
            _duration_in_range(name, value)
        else:
            well_formed(value, f"{name}.")


def _timestamp_in_range(name: str, ts: Message) -> None:
    seconds, nanos = ts.seconds, ts.nanos  # type: ignore[attr-defined]
    if not 0 <= nanos < NANOS_PER_SECOND:
        raise InvalidArgument(name, "nanos must be between 0 and 999,999,999")
    if not MIN_TIMESTAMP_SECONDS <= seconds <= MAX_TIMESTAMP_SECONDS:
        raise InvalidArgument(name, "must be between years 1 and 9999")
    # Stored to the microsecond, the first and the last instant of that range are the
    # driver's spelling of -infinity and infinity (datetime.min and datetime.max), which
    # read back without a time zone: a value no comparison can take.
    micros = seconds * 1_000_000 + nanos // 1_000
    if micros == MIN_TIMESTAMP_SECONDS * 1_000_000:
        raise InvalidArgument(name, "must be after 0001-01-01T00:00:00Z")
    if micros == MAX_TIMESTAMP_SECONDS * 1_000_000 + 999_999:
        raise InvalidArgument(name, "must be before 9999-12-31T23:59:59.999999Z")


def _duration_in_range(name: str, d: Message) -> None:
    seconds, nanos = d.seconds, d.nanos  # type: ignore[attr-defined]
    if not -MAX_DURATION_SECONDS <= seconds <= MAX_DURATION_SECONDS:
        raise InvalidArgument(name, "must be within 10,000 years")
    if not -NANOS_PER_SECOND < nanos < NANOS_PER_SECOND or seconds * nanos < 0:
        raise InvalidArgument(name, "nanos must be below one second and share the sign of seconds")


def malformed(message: Message) -> str | None:
    """What ``well_formed`` refuses in ``message`` (naming the field), or None."""
    try:
        well_formed(message)
    except InvalidArgument as exc:
        return exc.message
    return None


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
