"""Capture every fused candidate of each search, with query and candidate texts (offline MaxSim)."""
import argparse, asyncio, pickle, sys
from pathlib import Path

from brain.server.domain.knowledge.measures import embedding_text
from brain.server.measure import knowledge_eval as ke, knowledge_folds
from brain.server.measure.private import private_brain


class TextCapture(ke.Capture):
    def __init__(self, searching, questions):
        super().__init__(searching, questions)
        self.rows = []

    def __call__(self, q):
        hits, size = self.seen[-1]
        texts = [embedding_text(h.row["heading_path"] or (), h.row["content"]) for h in hits]
        ids = [str(h.row["chunk_id"]) for h in hits]
        super().__call__(q)
        self.rows.append(dict(question=q.question, part=q.part, texts=texts, ids=ids,
                              cand=self.captured[-1]))


async def knowledge(data: Path, out: Path):
    qa = ke.load(data)
    async with private_brain("local") as brain:
        key = await ke.private_key(brain.owner_dsn, brain.pepper)
        brain.memories.knowledge.reading_models = {}
        cap = TextCapture(brain.memories.knowledge, qa.questions)
        result = await ke.run_knowledge(brain.address, key, qa.root, qa.documents, qa.questions, True, cap)
    print(ke.format_table(result))
    pickle.dump(cap.rows, out.open("wb"))


async def locomo(data: Path, out: Path):
    from brain.server.measure.locomo import run as lr, folds as lf
    from brain.server.measure.locomo.data import load_locomo as lload
    last = {}
    orig_search = lr._search

    async def search(stub, bucket, query, k):
        last["q"] = query
        return await orig_search(stub, bucket, query, k)

    lr._search = search
    rows = []
    orig_take = lf.Capture.take

    def take(self, conversation, category, evidence, turns_of):
        if not self._seen:
            return
        hits, size = self._seen[-1]
        by_dia = {t.dia_id: t.content for t in convs[conversation].turns}
        texts = [" ".join(by_dia[d] for d in sorted(turns_of.get(str(h.row["memory_id"]), ()))) for h in hits]
        ids = [str(h.row["memory_id"]) for h in hits]
        orig_take(self, conversation, category, evidence, turns_of)
        rows.append(dict(question=last["q"], texts=texts, ids=ids, cand=self.searches[-1]))

    lf.Capture.take = take
    convs = lload(data)
    res = await lr.run_locomo(convs, embedder="local", folds=True, learned_only=True)
    print(res.cross_validation.learned.overall.as_json() if res.cross_validation else None)
    pickle.dump(rows, out.open("wb"))


if __name__ == "__main__":
    from brain.server.telemetry import logs; logs.configure("warning")
    mode, data, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    asyncio.run({"knowledge": knowledge, "locomo": locomo}[mode](data, out))
