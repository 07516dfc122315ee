"""The entity graph: what memories assert about entities and relations, and its reads.

Memories carry a ``GraphDraft`` (SaveMemory, UpdateMemory with ``graph`` in the mask,
ProposeMemory). It is validated with the rest of the request, before any transaction,
and written in the memory's own transaction:

- an entity is one per tenant and normalised name (NFKC, case-folded, whitespace
  collapsed); relation endpoints name entities of the same draft by name or alias, or
  mention a new one implicitly. Aliases resolve only within the draft: resolving them
  against other memories would tell a writer what invisible memories say;
- a single-valued (``CARDINALITY_ONE``) relation closes the valid time of the previous
  object's facts the writer can see and may change (the old fact stays in history);
- a proposal's assertions are pending until it is approved; a supersede retires the old
  memory's assertions; a forget erases them, and every entity left unasserted.

Reads (``GraphService``) answer only from memories the caller can see, and an entity no
visible memory asserts is NOT_FOUND exactly like a name never used.

Validation of a memory's ``GraphDraft`` lives in `assertions`, its writes (inside the
memory's transaction) in `writes`, and ``GraphService`` in `reads`.
"""

from __future__ import annotations

from brain.server.domain.graph.assertions import (
    NOTHING,
    Assertions,
    entity_not_found,
    parse_draft,
    query_names,
)
from brain.server.domain.graph.writes import (
    approve,
    assert_graph,
    erase,
    replace_graph,
    rescope,
    retire,
)

__all__ = [
    "NOTHING",
    "Assertions",
    "approve",
    "assert_graph",
    "entity_not_found",
    "erase",
    "parse_draft",
    "query_names",
    "replace_graph",
    "rescope",
    "retire",
]
