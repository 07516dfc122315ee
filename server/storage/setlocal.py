"""Transaction-local settings as ``SET LOCAL`` statements, the one way the server sets them.

Row-level security and the audit triggers read the caller's tenant, key, confinement and
labels from transaction-local settings. ``set_config(name, value, true)`` would take them as
bind parameters, but Citus does not carry a ``set_config`` to the worker nodes that run a
distributed query, while it does carry ``SET LOCAL`` (``citus.propagate_set_commands =
'local'``). ``SET`` takes no bind parameters, so values travel as quoted literals: every
setting of a request goes in one simple-query round trip, quoted by ``literal`` below.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import asyncpg

# A setting name: a plain or a dotted (extension/custom) identifier, never quoted.
_NAME = re.compile(r"[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)?")


def literal(value: str) -> str:
    """``value`` as a PostgreSQL string constant that reads back as exactly ``value``.

    Quotes are doubled; with a backslash the constant is an escape string (``E'...'``) with
    backslashes doubled too, which reads the same whatever ``standard_conforming_strings``
    says (PostgreSQL's own ``quote_literal`` does the same). A NUL cannot be in a text value
    and is refused.
    """
    if "\0" in value:
        raise ValueError("a setting cannot hold a NUL character")
    quoted = value.replace("'", "''")
    if "\\" in value:
        return "E'" + quoted.replace("\\", "\\\\") + "'"
    return "'" + quoted + "'"


def statements(settings: Mapping[str, str]) -> str:
    """One ``SET LOCAL name = '<value>';`` per setting, as one simple-query string."""
    parts = []
    for name, value in settings.items():
        if not _NAME.fullmatch(name):
            raise ValueError(f"not a setting name: {name!r}")
        parts.append(f"SET LOCAL {name} = {literal(value)}")
    return ";\n".join(parts)


async def set_local(conn: asyncpg.Connection, settings: Mapping[str, str]) -> None:
    """Set ``settings`` for the rest of the current transaction, in one round trip."""
    if settings:
        await conn.execute(statements(settings))  # no arguments: the simple-query protocol


async def current_tenant(conn: asyncpg.Connection) -> str | None:
    """The tenant this transaction was opened for (``brain.tenant_id``), to pass to a
    definer function as its tenant argument: on Citus a call whose tenant is a parameter
    runs where the tenant's shard is (migration 0059)."""
    value: str | None = await conn.fetchval("SELECT brain_current_tenant()::text")
    return value
