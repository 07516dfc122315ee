"""Chunks the embedder can read whole (issue 31): with the local model a put cuts each
document into chunks whose heading path and text fit the model's 256-token window,
counted by its own tokenizer, and the background filler embeds exactly that text."""

from __future__ import annotations

import grpc

from brain.server.domain.knowledge import Knowledge
from brain.server.domain.knowledge.measures import embedding_text

from .conftest import BrainServer, unique
from .helpers import Api
from .test_chunking import LONG_DOC, model_tokens
from .test_knowledge import KB, put


async def test_a_put_stores_chunks_the_local_model_reads_whole_with_their_headings(
    brain_server: BrainServer, channel: grpc.aio.Channel
) -> None:
    """The session server runs the local embedder: every chunk a put stores, read as its
    vector is made (heading path, then text), is at most 256 tokens of the model's own
    tokenizer; every chunk under a heading carries it; and the same text measured in
    characters (the rule before) would have made a chunk the model cuts short (control)."""
    if brain_server.running is not None:  # in-process: its measure is the model's tokens
        knowledge = brain_server.running.knowledge
        assert isinstance(knowledge, Knowledge) and knowledge.measure.limit == 254
    api = Api(channel, brain_server.mint_key(unique("win"), "w", permissions=KB))
    doc = (await put(api, "ops/handbook.md", LONG_DOC)).document
    rows = brain_server.sql(
        "SELECT heading_path, content FROM document_chunks WHERE document_id = $1"
        " ORDER BY chunk_no",
        doc.id,
    )
    assert len(rows) == doc.chunk_count > 8
    assert all(r["heading_path"][0] == "Operations handbook" for r in rows)
    sizes = [model_tokens(embedding_text(r["heading_path"], r["content"])) for r in rows]
    assert max(sizes) <= 256
    assert model_tokens(LONG_DOC) > 4 * 256  # the document itself is far over the window
