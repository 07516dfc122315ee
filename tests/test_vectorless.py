"""Hits awaiting their vector: a chunk the filler has not reached, or a memory saved while
the embedder was down, is found by the default (hybrid) search for a word only it holds.

With no vector of the active model the row has no cosine to weigh; the hybrid relevance
model would read the missing cosine as "unrelated" and silence or bury it, so `fuse` gives
it the lexical model's relevance, order and floor. The embedder here gives every text one
vector (but the rare word's texts, and the query of it, one of their own: 0.71 to the
others', and 1 to each other), so the semantic lane finds every embedded row for any query,
as a real embedder finds something for most (and a word no row holds must still be silent).
"""

from __future__ import annotations

from brain.v1 import knowledge_pb2, memory_pb2

from .conftest import LoopThread, PgCluster, unique
from .helpers import Api, serving
from .test_knowledge import ALL, get_call, put, search
from .test_knowledge_filler import Embeddings, quiet, toy_server, until, vectors

__all__ = ["quiet"]  # the fixture: no other filler reaches these tests' chunks


async def test_a_chunk_awaiting_its_vector_is_not_silenced_by_hybrid_search(
    pg_cluster: PgCluster, loop_thread: LoopThread, quiet: None
) -> None:
    """A chunk put after the collection's others were embedded, its own vector not there
    yet, is found by the default (hybrid) search for a word only it holds: with no vector
    it has no cosine to weigh, so its relevance is the lexical model's, not a hybrid one
    that reads the missing cosine as "unrelated" and silences it. Once its vector lands it
    is found by both lanes (control), and a word no chunk holds stays silent."""
    with serving(Embeddings()) as embeddings:
        embeddings.alike, embeddings.apart = True, "zanzibarquux"
        async with (
            toy_server(pg_cluster, loop_thread, embeddings) as server,
            server.channel() as channel,
        ):
            api = Api(channel, server.mint_key(unique("fill"), "w", permissions=ALL))
            topics = ("alpine", "harbour", "meadow", "canyon", "glacier", "orchard")
            docs = []
            for n, topic in enumerate(topics):
                sections = "".join(
                    f"## Part {k}\n\nThe {topic} survey notes item {n}-{k} in the ledger.\n\n"
                    for k in range(10)
                )
                docs.append((await put(api, f"{topic}.md", f"# {topic}\n\n{sections}")).document)
            assert sum(d.chunk_count for d in docs) >= 50  # the floor applies (floor_min_rows)

            async def landed(ids: list[str]) -> bool:
                got = [await get_call(api, i) for i in ids]
                return all(g.document.fully_embedded for g in got)

            await until(lambda: landed([d.id for d in docs]), "the collection's vectors land")
            embeddings.refuse = "Rotate the"  # the next chunk's vector is refused, retried
            late = (
                await put(api, "runbook.md", "# Runbook\n\nRotate the zanzibarquux keys weekly.\n")
            ).document
            assert [v for _, v, _ in vectors(server, late.id)] == [False]
            pending = await search(api, "zanzibarquux")
            assert pending.lanes == knowledge_pb2.KNOWLEDGE_LANES_HYBRID
            assert [h.source.path for h in pending.hits][:1] == ["runbook.md"], pending
            assert pending.hits[0].semantic_rank == 0 and pending.below_floor == 0
            nothing = await search(api, "quixotry")
            assert not nothing.hits
            embeddings.refuse = ""
            await until(lambda: landed([late.id]), "the late chunk's vector lands")
            embedded = await search(api, "zanzibarquux")
            assert [h.source.path for h in embedded.hits][:1] == ["runbook.md"]
            assert embedded.hits[0].semantic_rank == 1


async def test_a_memory_saved_while_the_embedder_was_down_is_not_silenced(
    pg_cluster: PgCluster, loop_thread: LoopThread, quiet: None
) -> None:
    """A memory saved during an embedder outage has no vector until a backfill; once the
    embedder is back, the default search for a word only it holds returns it first, by
    the lexical model's relevance (the hybrid one silenced it), and after the backfill by
    both lanes. (The memories' hybrid model answers any query at the cosines every text has
    here, so silence is shown by the chunks' test.)"""
    with serving(Embeddings()) as embeddings:
        embeddings.alike, embeddings.apart = True, "zanzibarquux"
        async with (
            toy_server(pg_cluster, loop_thread, embeddings) as server,
            server.channel() as channel,
        ):
            tenant = unique("vless")
            api = Api(channel, server.mint_key(tenant, "w", permissions=ALL))
            for n in range(55):  # past floor_min_rows: the default floor applies
                await api.save(f"The survey ledger notes item {n} for the harbour team.")
            embeddings.down = True
            late = (await api.save("Rotate the zanzibarquux keys weekly.")).memory
            embeddings.down = False
            stored = server.sql(
                "SELECT embedding IS NULL AS missing FROM memories WHERE memory_id = $1", late.id
            )
            assert [r["missing"] for r in stored] == [True]
            response = await api.memories.SearchMemories(
                memory_pb2.SearchMemoriesRequest(scope=api.scope(), query="zanzibarquux"),
                metadata=api.md,
            )
            assert [h.memory.id for h in response.hits][:1] == [late.id], response
            assert response.hits[0].semantic_rank == 0 and response.below_floor == 0
            done = server.admin(
                "embeddings", "backfill", "--tenant", tenant, "--embedder", "openai",
                "--openai-url", embeddings.url, "--openai-model", "toy",
                "--embedding-dimension", "384",
            )  # fmt: skip
            assert "backfilled 1 memories" in done.stdout, done.stdout + done.stderr
            embedded = await api.memories.SearchMemories(
                memory_pb2.SearchMemoriesRequest(scope=api.scope(), query="zanzibarquux"),
                metadata=api.md,
            )
            assert [h.memory.id for h in embedded.hits][:1] == [late.id]
            assert embedded.hits[0].semantic_rank == 1
