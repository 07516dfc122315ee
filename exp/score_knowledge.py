"""Offline: the learned order/relevance with MaxSim as a feature, or MaxSim reranking the top k."""
import dataclasses, pickle, sys
import numpy as np
sys.path.insert(0, "/work/wt-maxsim/exp")
from brain.server.domain.retrieval import relevance
from brain.server.measure import crossval, knowledge_folds as kf

BASE_FEATURES = relevance.FEATURES
relevance.FEATURES = BASE_FEATURES + ("maxsim",)
ORDER = relevance.ORDER_FEATURES
REL = relevance.KNOWLEDGE_RELEVANCE_FEATURES
KS = kf.KS


def load(path, variant):
    rows = pickle.load(open(path, "rb"))
    for r in rows:
        c = r["cand"]
        base = relevance.feature_rows(c.lanes, c.corpus_size)
        ms = r["ms"][variant] if variant else np.zeros(len(base))
        c.__dict__["features"] = np.hstack([base, ms[:, None]]) if len(base) else np.zeros((0, len(relevance.FEATURES)))
    return rows


def fit(train, order=ORDER, rel=REL):
    return crossval.fit_model(train, tolerance=kf.FLOOR_TOLERANCE, k=kf.FLOOR_AT,
                              order_features=order, relevance_features=rel)


class Rerank(kf.Scores):
    """Scores whose order is the model's, then the top `k` reordered by maxsim (+ w * z)."""
    def __init__(self, k=0, w=None):
        super().__init__(); self.k, self.w = k, w

    def order(self, s, model, floor):
        o = crossval.ranked(s, model, floor, learned=True)
        if not self.k or not o:
            return o
        ms = s.features[:, -1]
        head = o[:self.k]
        if self.w is None:
            key = {i: -ms[i] for i in head}
        else:
            z = model.order_scores(s.features)
            key = {i: -(self.w * ms[i] + z[i]) for i in head}
        return sorted(head, key=lambda i: (key[i], head.index(i))) + o[self.k:]

    def add(self, s, model):
        order = self.order(s, model, 0.0)
        floored = self.order(s, model, model.floor)
        if not s.evidence:
            self.unanswerable += 1; self.silent += not floored; return
        self.answerable += 1
        for ranking, counts in ((order, self.hits), (floored, self.floored_hits)):
            rank = next((i for i, c in enumerate(ranking, 1) if s.turns[c]), None)
            for k in KS:
                counts[k] += rank is not None and rank <= k


def cv(cands, fitter, make=lambda: Rerank()):
    dev = [s for s in cands if s.conversation >= 0]
    held = [s for s in cands if s.conversation < 0]
    sc = make()
    for fold in sorted({s.conversation for s in dev}):
        m = fitter([s for s in dev if s.conversation != fold])
        for s in dev:
            if s.conversation == fold:
                sc.add(s, m)
    m = fitter(dev)
    h = make()
    for s in held:
        h.add(s, m)
    return sc, h, m


def line(name, sc):
    d = sc.as_json()
    return (f"{name:<44}" + " ".join(f"{d[f'hit@{k}']:.3f}" for k in KS) + " | "
            + " ".join(f"{d[f'floored_hit@{k}']:.3f}" for k in (1, 5, 10)) + f"  silent {sc.silent}/{sc.unanswerable}")


if __name__ == "__main__":
    print(f"{'':<44}hit@1 hit@3 hit@5 hit@10 | floored hit@1 @5 @10")
    for variant in ("nostop", "all"):
        ks = [r["cand"] for r in load("/tmp/maxsim/ks_ms.pkl", variant)]
        kv = [r["cand"] for r in load("/tmp/maxsim/kv_ms.pkl", variant)]
        setups = {
            "baseline": (lambda t: fit(t), lambda: Rerank()),
            "order+maxsim": (lambda t: fit(t, ORDER + ("maxsim",)), lambda: Rerank()),
            "order+rel+maxsim": (lambda t: fit(t, ORDER + ("maxsim",), REL + ("maxsim",)), lambda: Rerank()),
            "rerank top5 by maxsim": (lambda t: fit(t), lambda: Rerank(5)),
            "rerank top10 by maxsim": (lambda t: fit(t), lambda: Rerank(10)),
            "rerank top20 by maxsim": (lambda t: fit(t), lambda: Rerank(20)),
        }
        if variant == "all":
            setups = {k: v for k, v in setups.items() if k != "baseline"}
        for name, (fitter, make) in setups.items():
            d, h, m = cv(ks, fitter, make)
            v = make()
            for s in kv:
                v.add(s, m)
            tag = f"{name} [{variant}]"
            print(line(f"{tag} dev-cv", d)); print(line(f"{tag} held-out", h)); print(line(f"{tag} VALIDATION", v))
            if "maxsim" in name and "order" in name:
                print("   order weight maxsim", m.order[-1], "rel w", m.weights[-1] if len(m.weights) > 17 else 0, "floor", m.floor)
