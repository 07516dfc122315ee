"""Per-tenant quotas: the check every write that adds memories or documents makes first.

A quota counts the whole tenant (a confined key must not undercount), so its refusal says
something about rows the caller cannot see. Named exactly, that would be a measure of
them: a writer growing its own rows until refused, and shrinking them again, reads off how
much the rest of the tenant stores — to the byte, after every write of another user. So
the check rounds the part the caller's key cannot see up to a *grain* of the limit (1/32
of it, `grain`): a write is refused when what the key sees, plus what it adds, plus the
hidden rest rounded up to the grain, passes the limit. What the key sees is counted in any
scope it may ask for (`key_wide`), not only the request's: rows of its own in another
session or namespace counted as hidden would let it move a known number of rows across
the rounding and read the rest exactly. A caller then learns the hidden usage only to the
grain, and a key that sees the whole tenant is checked exactly. The price: a key that
does not see everything may be refused up to one grain before the tenant is full.
Rounding up only ever refuses earlier, so concurrent writers still never overshoot.

What it does not stop: two keys whose views differ, in one hand (the second writes rows
the first cannot see, in known numbers), can still read what neither sees, to the row.
Walls that must hide even how much is stored need a tenant each (quotas are per tenant).
"""

from __future__ import annotations

from dataclasses import replace

import asyncpg

from brain.authz import RequestScope
from brain.server.errors import ResourceExhausted
from brain.server.storage import quotas as sql
from brain.server.storage.visibility import Visibility

# The hidden usage is rounded up to 1/GRAIN_PARTS of the limit.
GRAIN_PARTS = 32


def grain(limit: int) -> int:
    """The unit the usage a caller cannot see is rounded up to: 1/32 of the limit, at
    least 1."""
    return max(1, -(-limit // GRAIN_PARTS))


def key_wide(vis: Visibility, namespace: str = "") -> Visibility:
    """What ``vis``'s key may see in any request scope (within ``namespace`` if given):
    its confinement, labels and proposals, without the request's narrowing."""
    return replace(vis, scope=RequestScope(namespace=namespace))


def exceeds(limit: int, used: int, visible: int, adding: int) -> bool:
    """Whether adding ``adding`` to a tenant storing ``used`` (``visible`` of it seen by
    the caller) passes ``limit``, the hidden rest rounded up to the limit's grain."""
    hidden = max(used - visible, 0)
    unit = grain(limit)
    return visible + adding + -(-hidden // unit) * unit > limit


async def reserve_memories(conn: asyncpg.Connection, vis: Visibility, adding: int) -> None:
    """Refuse a write that would take the tenant past its memory quota (`exceeds`, with
    what ``vis`` sees).

    Call it in the write's transaction, right before the insert: concurrent writers of
    the tenant then wait for each other, so together they never overshoot.

    The refusal names the limit, never how many the tenant stores: that count includes
    memories the caller cannot see (``brain-admin tenants list`` shows it to operators)."""
    if adding <= 0:
        return
    quota = await sql.reserve_memories(conn)
    if quota is None:
        return
    visible = await sql.visible_memories(conn, key_wide(vis))
    if exceeds(quota.limit, quota.used, visible, adding):
        raise ResourceExhausted(
            f"quota memories exceeded: this tenant may store at most {quota.limit} "
            "memories; forget some or ask an operator to raise the quota "
            "(brain-admin tenants set-quota)"
        )


async def reserve_documents(
    conn: asyncpg.Connection, vis: Visibility, adding: int, adding_bytes: int
) -> None:
    """Refuse a put that would take the tenant past its document quotas: ``adding``
    documents (1 for a new one, 0 for a new version) and ``adding_bytes`` of content (the
    new version's size less the old one's). Called as ``reserve_memories`` is, in the
    put's transaction right before it writes, and, like it, names the limit and never how
    much the tenant stores."""
    if adding <= 0 and adding_bytes <= 0:
        return
    quota = await sql.reserve_documents(conn, vis.tenant_id)
    if quota is None:
        return
    documents, document_bytes = await sql.visible_documents(conn, key_wide(vis))
    limit = quota.max_documents
    if adding > 0 and limit is not None and exceeds(limit, quota.documents, documents, adding):
        raise ResourceExhausted(
            f"quota documents exceeded: this tenant may store at most {limit} documents; "
            "delete some or ask an operator to raise the quota "
            "(brain-admin tenants set-quota --documents)"
        )
    limit = quota.max_document_bytes
    if (
        adding_bytes > 0
        and limit is not None
        and exceeds(limit, quota.document_bytes, document_bytes, adding_bytes)
    ):
        raise ResourceExhausted(
            f"quota document bytes exceeded: this tenant may store at most {limit} bytes of "
            "documents; delete some or ask an operator to raise the quota "
            "(brain-admin tenants set-quota --document-bytes)"
        )
