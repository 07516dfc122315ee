"""Chunks the embedder can read whole (issue 31): with the local model a put cuts each
document into chunks whose heading path and text fit the model's 256-token window,
counted by its own tokenizer, and the background filler embeds exactly that text."""

from __future__ import annotations

import grpc

from brain.server.domain.knowledge import Knowledge
from brain.server.domain.knowledge.measures import embedding_text

from .conftest import BrainServer, LoopThread, PgCluster, server_settings, unique
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


async def test_chunks_follow_the_tenants_own_embedder(
    brain_server: BrainServer, pg_cluster: PgCluster, loop_thread: LoopThread
) -> None:
    """On a server whose default embedder is the local model, a tenant routed to another
    embedder (here none, lexical only) gets chunks cut in characters, one of which the local
    model could not read whole, while the other tenant's same document is cut to the local
    model's window (control)."""
    routed, default = unique("win"), unique("win")
    keys = {t: brain_server.mint_key(t, "w", permissions=KB) for t in (routed, default)}
    server = BrainServer(
        cluster=pg_cluster, loop=loop_thread,
        settings=server_settings(pg_cluster, tenant_embedders=f"{routed}=none"),
    )  # fmt: skip
    server.start()
    try:
        async with server.channel() as channel:
            docs = {}
            for tenant in (routed, default):
                api = Api(channel, keys[tenant])
                docs[tenant] = (await put(api, "ops/handbook.md", LONG_DOC)).document
    finally:
        server.stop()

    def sizes(document_id: str) -> list[int]:
        rows = server.sql(
            "SELECT heading_path, content FROM document_chunks WHERE document_id = $1",
            document_id,
        )
        return [model_tokens(embedding_text(r["heading_path"], r["content"])) for r in rows]

    assert max(sizes(docs[default].id)) <= 256
    assert max(sizes(docs[routed].id)) > 256
    assert docs[routed].chunk_count < docs[default].chunk_count
