"""Scope confinement: what a key may name in a request.

A key may fix ``user_id``, a set of ``namespaces`` and ``session_id``. For each
field it fixes, a request must set the field, non-empty, to the key's value: an
empty field would mean "everyone" and is refused rather than silently narrowed.
Nested copies of scope fields (in filters) must agree as well.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

# Identifiers for users, namespaces, sessions and labels: printable, no separators
# that could be confused in logs or SQL arrays.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@/+-]{0,127}$")


def is_valid_name(value: str) -> bool:
    """Whether a user id, namespace, session id or label is well-formed."""
    return bool(_NAME.fullmatch(value))


@dataclass(frozen=True, slots=True)
class Confinement:
    """The scope fields a key is fixed to. Empty / None means unconfined."""

    user_id: str | None = None
    namespaces: frozenset[str] = field(default_factory=frozenset)
    session_id: str | None = None

    @property
    def is_confined(self) -> bool:
        return bool(self.user_id or self.namespaces or self.session_id)


@dataclass(frozen=True, slots=True)
class RequestScope:
    """The scope a request names (mirrors brain.v1.Scope, without protobuf)."""

    user_id: str = ""
    namespace: str = ""
    session_id: str = ""


@dataclass(frozen=True, slots=True)
class NestedScope:
    """Scope-like fields nested in a filter; empty means "not narrowed"."""

    user_id: str = ""
    namespaces: Sequence[str] = ()
    session_id: str = ""


class ScopeViolation(Exception):
    """A request names a scope its key may not use. Carries the offending field.

    ``malformed``: the request contradicts itself (a filter naming another user, session or
    namespace than its own scope), whatever the key: the caller's mistake, not a wall."""

    def __init__(self, field_name: str, message: str, *, malformed: bool = False) -> None:
        super().__init__(message)
        self.field_name = field_name
        self.message = message
        self.malformed = malformed


def check_scope(
    confinement: Confinement,
    scope: RequestScope,
    nested: NestedScope | None = None,
    *,
    required: bool = True,
) -> None:
    """Raise ScopeViolation unless ``scope`` (and ``nested``) stay inside ``confinement``.

    With ``required=False`` (rowless methods) unset fields are allowed, but a field
    that is set must still agree with the key. A field that is no well-formed name (see
    `is_valid_name`) is the caller's mistake whatever the key: every method refuses it as
    malformed, as the writes always did (reads took a 70,000-character user id).
    """
    _check_names(scope, nested)
    if confinement.user_id is not None:
        _check_field("scope.user_id", scope.user_id, {confinement.user_id}, required)
    if confinement.namespaces:
        _check_field("scope.namespace", scope.namespace, confinement.namespaces, required)
    if confinement.session_id is not None:
        _check_field("scope.session_id", scope.session_id, {confinement.session_id}, required)
    if nested is None:
        return
    if nested.user_id and scope.user_id and nested.user_id != scope.user_id:
        raise ScopeViolation(
            "filter.user_id", "filter.user_id must equal scope.user_id", malformed=True
        )
    if confinement.user_id is not None and nested.user_id:
        _check_field("filter.user_id", nested.user_id, {confinement.user_id}, True)
    if nested.session_id and scope.session_id and nested.session_id != scope.session_id:
        raise ScopeViolation(
            "filter.session_id", "filter.session_id must equal scope.session_id", malformed=True
        )
    if confinement.session_id is not None and nested.session_id:
        _check_field("filter.session_id", nested.session_id, {confinement.session_id}, True)
    for ns in nested.namespaces:
        if scope.namespace and ns != scope.namespace:
            raise ScopeViolation(
                "filter.namespaces",
                "filter.namespaces must only repeat scope.namespace",
                malformed=True,
            )
        if confinement.namespaces:
            _check_field("filter.namespaces", ns, confinement.namespaces, True)


NAME_RULE = (
    "must be 1-128 characters of letters, digits and . _ : @ / + -, starting with a letter or digit"
)


def _check_names(scope: RequestScope, nested: NestedScope | None) -> None:
    fields = [
        ("scope.user_id", scope.user_id),
        ("scope.namespace", scope.namespace),
        ("scope.session_id", scope.session_id),
    ]
    if nested is not None:
        fields += [("filter.user_id", nested.user_id), ("filter.session_id", nested.session_id)]
        fields += [("filter.namespaces", ns) for ns in nested.namespaces]
    for name, value in fields:
        if value and not is_valid_name(value):
            raise ScopeViolation(name, f"{name} {NAME_RULE}", malformed=True)


def _check_field(name: str, value: str, allowed: frozenset[str] | set[str], required: bool) -> None:
    if not value:
        if required:
            raise ScopeViolation(name, f"{name} is required: this key is confined on it")
        return
    if value not in allowed:
        raise ScopeViolation(name, f"{name} is outside this key's scope")
