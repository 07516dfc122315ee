"""The handler of each brain-mcp tool: read the arguments, call one typed RPC, shape the
result. `tools.TOOLS` pairs each handler with its name, schemas and RPC method."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from brain.clients import AsyncBrainClient
from brain.clients.mcp._arguments import (
    ToolInputError,
    _about,
    _draft_fields,
    _filter,
    _integer,
    _number,
    _strings,
    _text,
    _time,
)
from brain.clients.mcp._results import (
    _KNOWLEDGE_RANKINGS,
    _ORDERS,
    _RANKINGS,
    ToolOutput,
    _cite,
    _fact,
    _iso,
    _line,
    _source_json,
    _status,
    conflict_json,
    conflict_line,
    entity_json,
    memory_json,
    relation_json,
    relevance,
)
from brain.clients.mcp._schemas import MAX_TOKEN_BUDGET
from brain.v1 import common_pb2, memory_pb2


async def _remember(client: AsyncBrainClient, args: Mapping[str, Any]) -> ToolOutput:
    # The client attaches one idempotency key per call, so its retries never store twice.
    response = await client.save(
        _text(args, "content", required=True),
        supersedes=_strings(args, "supersedes"),
        graph=_about(args),
        **_draft_fields(args),
    )
    outcome = memory_pb2.SaveOutcome.Name(response.outcome).removeprefix("SAVE_OUTCOME_").lower()
    m = response.memory
    says = {
        "deduplicated": f"An identical memory already existed; its id is {m.id}.",
        "proposed": f"Stored as candidate {m.id}; it awaits human review before it is recalled.",
    }.get(outcome, f"Remembered as {m.id}.")
    conflicts = [conflict_json(c) for c in response.conflicts]
    for c in response.conflicts:
        says += f"\n{conflict_line(c, m.id)}"
    return says, {"id": m.id, "outcome": outcome, "memory": memory_json(m), "conflicts": conflicts}


async def _recall(client: AsyncBrainClient, args: Mapping[str, Any]) -> ToolOutput:
    query = _text(args, "query", required=True)
    limit = _integer(args, "limit", low=1, high=50, default=10)
    response = await client.search(
        query,
        limit=limit,
        filter=_filter(args),
        time=_time(args),
        min_relevance=_number(args, "min_score"),
    )
    ranking = _RANKINGS.get(response.ranking, "fused")
    reranked = response.ranking == memory_pb2.RANKING_RERANKED
    hits = []
    for h in response.hits:
        lanes = (("keywords", h.lexical_rank), ("exact words", h.exact_rank))
        hit: dict[str, Any] = {
            "id": h.memory.id,
            "score": relevance(h.relevance),
            "matched_by": [lane for lane, rank in (*lanes, ("meaning", h.semantic_rank)) if rank],
            "memory": memory_json(h.memory),
        }
        if reranked and h.rerank_score:
            hit["rerank_score"] = round(h.rerank_score, 4)
        if h.conflicts:
            hit["conflicts"] = [conflict_json(c) for c in h.conflicts]
        hits.append(hit)
    silenced = not hits and response.below_floor > 0
    structured = {
        "hits": hits,
        "ranking": ranking,
        "silenced": silenced,
        "below_floor": response.below_floor,
    }
    if silenced:
        return (
            f"Nothing relevant enough: {response.below_floor} weak matches were held back by "
            "the relevance floor (min_score 0 shows them).",
            structured,
        )
    if not hits:
        return "No memories found.", structured
    lines = [
        f"{len(hits)} memories, best first ({_ORDERS[ranking]}; score = relevance 0..1, one "
        "of the signals the order weighs, so scores need not fall down the list):"
    ]
    for i, (h, shown) in enumerate(zip(response.hits, hits, strict=True), 1):
        extra = f", rerank {shown['rerank_score']:.3f}" if "rerank_score" in shown else ""
        lines.append(f"{i}. score {shown['score']:.2f}{extra} {_line(h.memory)}")
        lines += [f"   {conflict_line(c, h.memory.id)}" for c in h.conflicts]
    return "\n".join(lines), structured


async def _list_memories(client: AsyncBrainClient, args: Mapping[str, Any]) -> ToolOutput:
    response = await client.list_page(
        filter=_filter(args),
        time=_time(args),
        page_size=_integer(args, "limit", low=1, high=100, default=20),
        page_token=_text(args, "page_token"),
    )
    found = list(response.memories)
    structured = {
        "memories": [memory_json(m) for m in found],
        "next_page_token": response.next_page_token,
    }
    lines = [_line(m) for m in found] or ["No memories."]
    if response.next_page_token:
        lines.append(f"More: call list_memories with page_token={response.next_page_token}")
    return "\n".join(lines), structured


async def _get_memory(client: AsyncBrainClient, args: Mapping[str, Any]) -> ToolOutput:
    m = (await client.get(_text(args, "id", required=True))).memory
    return json.dumps(memory_json(m), indent=2), {"memory": memory_json(m)}


_UPDATABLE = ("content", "kind", "tags", "labels", "importance", "valid_from", "valid_to")


async def _update_memory(client: AsyncBrainClient, args: Mapping[str, Any]) -> ToolOutput:
    memory_id = _text(args, "id", required=True)
    content = _text(args, "content") or None
    fields = _draft_fields(args)
    if content is None and not fields:
        raise ToolInputError(f"give at least one field to change: {', '.join(_UPDATABLE)}")
    m = (
        await client.update(
            memory_id,
            content=content,
            expected_version=_integer(args, "expected_version", low=0, high=2**31 - 1, default=0),
            **fields,
        )
    ).memory
    says = (
        f"Stored the change as candidate {m.id}; it awaits human review."
        if m.status == common_pb2.MEMORY_STATUS_CANDIDATE
        else f"Updated {m.id}; it is now version {m.version}."
    )
    return says, {"id": m.id, "version": m.version, "memory": memory_json(m)}


async def _get_memory_history(client: AsyncBrainClient, args: Mapping[str, Any]) -> ToolOutput:
    versions = (await client.history(_text(args, "id", required=True))).versions
    lines = [
        f"v{v.version} {_iso(v.recorded_at)} {v.change or 'save'} by {v.changed_by or '?'}: "
        f"({_status(v.status)}) {v.content}"
        for v in versions
    ]
    return "\n".join(lines) or "No versions.", {"versions": [memory_json(v) for v in versions]}


async def _forget(client: AsyncBrainClient, args: Mapping[str, Any]) -> ToolOutput:
    response = await client.forget(
        _text(args, "id", required=True), reason=_text(args, "reason", required=True)
    )
    text = f"Forgot {response.id}; its content is erased and cannot be saved again here."
    return text, {"id": response.id, "tombstone_id": response.tombstone_id}


async def _propose_memory(client: AsyncBrainClient, args: Mapping[str, Any]) -> ToolOutput:
    response = await client.propose(
        _text(args, "content", required=True),
        reason=_text(args, "reason", required=True),
        supersedes=_strings(args, "supersedes"),
        graph=_about(args),
        **_draft_fields(args),
    )
    c = response.candidate
    return f"Proposed as candidate {c.id}; a reviewer must approve it.", {
        "id": c.id,
        "memory": memory_json(c),
    }


async def _list_candidates(client: AsyncBrainClient, args: Mapping[str, Any]) -> ToolOutput:
    limit = _integer(args, "limit", low=1, high=100, default=20)
    found: list[common_pb2.Memory] = []
    async for candidate in client.list_candidates(
        proposed_by=_text(args, "proposed_by"), page_size=limit
    ):
        found.append(candidate)
        if len(found) >= limit:
            break
    if not found:
        return "No pending candidates.", {"candidates": []}
    lines = [f"{_line(c)} — proposed by {c.created_by}: {c.proposal_reason}" for c in found]
    return "\n".join(lines), {"candidates": [memory_json(c) for c in found]}


async def _search_knowledge(client: AsyncBrainClient, args: Mapping[str, Any]) -> ToolOutput:
    query = _text(args, "query", required=True)
    response = await client.search_knowledge(
        query,
        limit=_integer(args, "limit", low=1, high=50, default=5),
        collections=_strings(args, "collections"),
        min_relevance=_number(args, "min_score"),
    )
    ranking = _KNOWLEDGE_RANKINGS.get(response.ranking, "fused")
    hits = []
    for h in response.hits:
        hit: dict[str, Any] = {
            "score": relevance(h.relevance),
            "source": _source_json(h.source),
            "content": h.content,
        }
        if ranking == "reranked" and h.rerank_score:
            hit["rerank_score"] = round(h.rerank_score, 4)
        hits.append(hit)
    silenced = not hits and response.below_floor > 0
    structured = {
        "hits": hits,
        "ranking": ranking,
        "silenced": silenced,
        "below_floor": response.below_floor,
    }
    if silenced:
        return (
            f"Nothing relevant enough: {response.below_floor} weak passages were held back by "
            "the relevance floor (min_score 0 shows them).",
            structured,
        )
    if not hits:
        return "No documents found.", structured
    lines = [
        f"{len(hits)} passages, best first ({_ORDERS[ranking]}; score = relevance 0..1, one "
        "of the signals the order weighs, so scores need not fall down the list):"
    ]
    for i, (h, shown) in enumerate(zip(response.hits, hits, strict=True), 1):
        extra = f", rerank {shown['rerank_score']:.3f}" if "rerank_score" in shown else ""
        lines.append(f"{i}. score {shown['score']:.2f}{extra} {_cite(h.source)}\n{h.content}")
    return "\n".join(lines), structured


async def _build_context(client: AsyncBrainClient, args: Mapping[str, Any]) -> ToolOutput:
    response = await client.build_context(
        _text(args, "query", required=True),
        token_budget=_integer(args, "token_budget", low=1, high=MAX_TOKEN_BUDGET, default=0),
    )
    items = []
    for i in response.items:
        # The fused score as the server gave it (`_RANK_SCORE`): clipped to 0..1 it read as
        # a relevance, which it is not.
        item: dict[str, Any] = {
            "id": i.id,
            "score": round(max(i.score, 0.0), 4),
            "tokens": i.tokens,
        }
        if i.kind == memory_pb2.CONTEXT_ITEM_KIND_KNOWLEDGE:
            item.update(kind="knowledge", source=_source_json(i.source))
        else:
            item["kind"] = "memory"
        items.append(item)
    structured = {
        "context": response.context,
        "items": items,
        "tokens_used": response.tokens_used,
        "omitted": response.omitted,
    }
    return response.context or "No relevant memories.", structured


async def _lookup_entity(client: AsyncBrainClient, args: Mapping[str, Any]) -> ToolOutput:
    response = await client.lookup_entity(
        _text(args, "name", required=True),
        time=_time(args),
        relation_limit=_integer(args, "limit", low=1, high=100, default=50),
    )
    e = response.entity
    aliases = f" (also {', '.join(e.aliases)})" if e.aliases else ""
    lines = [f"{e.name}{aliases}: {e.mention_count} memories, {e.degree} relations"]
    lines += [_fact(r) for r in response.relations]
    structured = {
        "entity": entity_json(e),
        "relations": [relation_json(r) for r in response.relations],
    }
    return "\n".join(lines), structured


async def _entity_neighbours(client: AsyncBrainClient, args: Mapping[str, Any]) -> ToolOutput:
    response = await client.neighbours(
        _text(args, "name", required=True),
        depth=_integer(args, "depth", low=1, high=3, default=1),
        time=_time(args),
        limit=_integer(args, "limit", low=1, high=100, default=50),
    )
    found = [
        {"depth": n.depth, "entity": entity_json(n.entity), "via": relation_json(n.via)}
        for n in response.neighbours
    ]
    lines = [f"{n.entity.name} (depth {n.depth}, via {_fact(n.via)})" for n in response.neighbours]
    text = "\n".join(lines) or f"{response.entity.name} has no related entities."
    return text, {"entity": entity_json(response.entity), "neighbours": found}
