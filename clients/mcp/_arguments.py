"""The arguments of brain-mcp's tools: reading what the model passed.

Each reader takes the tool's arguments and a name and returns a typed value or raises
`ToolInputError`, which the proxy answers as ``INVALID_ARGUMENT``; the builders below them turn
the shared arguments (draft fields, filters, time travel) into the client's request parts.
Refusing names a tool does not declare is `tools.check_arguments`, beside `ToolSpec`; it also
calls `refuse_invalid_text`, so no reader below sees a string that is not Unicode text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from brain.clients import DraftFields, graph_draft, time_travel
from brain.v1 import common_pb2, graph_pb2


class ToolInputError(ValueError):
    """The model passed arguments that do not fit the tool's schema."""


# JSON may escape half of a surrogate pair on its own ("\ud800"); Python's json reads it into
# a str that is not Unicode text and cannot be encoded as UTF-8 (protobuf, the MCP reply).
_LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")


def refuse_invalid_text(args: Mapping[str, Any]) -> None:
    """Refuse a string anywhere in the arguments, nested ones too, that is not Unicode text
    (it holds a lone surrogate), naming where it is (``'about[0].name'``); the bad string
    itself is never echoed, as it could not be written into the reply."""

    def check(text: str, what: str) -> None:
        if found := _LONE_SURROGATE.search(text):
            raise ToolInputError(
                f"{what} is not valid Unicode text: it holds a lone surrogate "
                f"(U+{ord(found.group()):04X} at position {found.start()}); send UTF-8 text"
            )

    def walk(value: Any, path: str) -> None:
        if isinstance(value, str):
            check(value, f"'{path}'")
        elif isinstance(value, Mapping):
            for key, item in value.items():
                check(str(key), f"a property name in '{path}'")
                walk(item, f"{path}.{key}")
        elif isinstance(value, list):
            for n, item in enumerate(value):
                walk(item, f"{path}[{n}]")

    for name, value in args.items():
        check(name, "an argument name")
        walk(value, name)


def _text(args: Mapping[str, Any], name: str, *, required: bool = False) -> str:
    value = args.get(name)
    if value is None or value == "":
        if required:
            raise ToolInputError(f"'{name}' is required and must be a non-empty string")
        return ""
    if not isinstance(value, str):
        raise ToolInputError(f"'{name}' must be a string")
    return value


def _strings(args: Mapping[str, Any], name: str) -> list[str]:
    value = args.get(name)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ToolInputError(f"'{name}' must be an array of strings")
    return value


def _number(args: Mapping[str, Any], name: str) -> float | None:
    value = args.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise ToolInputError(f"'{name}' must be a number between 0 and 1")
    return float(value)


def _integer(args: Mapping[str, Any], name: str, *, low: int, high: int, default: int) -> int:
    value = args.get(name)
    if value is None:
        return default
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # JSON Schema's integer: 5.0 is 5
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ToolInputError(f"'{name}' must be an integer between {low} and {high}")
    return value


def _instant(args: Mapping[str, Any], name: str) -> datetime | None:
    text = _text(args, name)
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ToolInputError(
            f"'{name}' must be an ISO-8601 date or time, e.g. 2025-01-31 or 2025-01-31T09:00:00Z"
        ) from exc
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _draft_fields(args: Mapping[str, Any]) -> DraftFields:
    fields: DraftFields = {}
    if kind := _text(args, "kind"):
        fields["kind"] = kind
    if tags := _strings(args, "tags"):
        fields["tags"] = tags
    if labels := _strings(args, "labels"):
        fields["labels"] = labels
    if (importance := _number(args, "importance")) is not None:
        fields["importance"] = importance
    if (valid_from := _instant(args, "valid_from")) is not None:
        fields["valid_from"] = valid_from
    if (valid_to := _instant(args, "valid_to")) is not None:
        fields["valid_to"] = valid_to
    return fields


def _about(args: Mapping[str, Any]) -> graph_pb2.GraphDraft | None:
    """The entities of ``about`` ([{"name", "type"?}]) as the memory's graph draft."""
    value = args.get("about")
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ToolInputError("'about' must be an array of objects with 'name' and 'type'")
    entities: list[tuple[str, str]] = []
    for n, item in enumerate(value):
        name, kind = item.get("name"), item.get("type", "")
        if not isinstance(name, str) or not name.strip():
            raise ToolInputError(f"'about[{n}].name' is required and must be a non-empty string")
        if not isinstance(kind, str):
            raise ToolInputError(f"'about[{n}].type' must be a string")
        unknown = sorted(set(item) - {"name", "type"})
        if unknown:
            raise ToolInputError(f"'about[{n}]' takes 'name' and 'type' only, not {unknown}")
        entities.append((name, kind))
    return graph_draft(entities) if entities else None


def _filter(args: Mapping[str, Any]) -> common_pb2.MemoryFilter | None:
    kind, tags = _text(args, "kind"), _strings(args, "tags")
    if not kind and not tags:
        return None
    return common_pb2.MemoryFilter(kinds=[kind] if kind else [], tags=tags)


def _time(args: Mapping[str, Any]) -> common_pb2.TimeTravel | None:
    as_of, valid_at = _instant(args, "as_of"), _instant(args, "valid_at")
    if as_of is None and valid_at is None:
        return None
    return time_travel(as_of=as_of, valid_at=valid_at)
