import pickle, sys
import numpy as np
sys.path.insert(0, "/work/wt-maxsim/exp")
from score_knowledge import relevance, crossval, Rerank, ORDER
from brain.server.measure.locomo.scoring import score_question, summarise, by_category, Silence
from brain.server.measure.locomo.data import ADVERSARIAL

REL = relevance.RELEVANCE_FEATURES
K = 20


def load(variant):
    rows = pickle.load(open("/tmp/maxsim/lc_ms.pkl", "rb"))
    for r in rows:
        c = r["cand"]
        base = relevance.feature_rows(c.lanes, c.corpus_size)
        ms = r["ms"][variant]
        c.__dict__["features"] = np.hstack([base, ms[:, None]]) if len(base) else np.zeros((0, len(relevance.FEATURES)))
    return [r["cand"] for r in rows]


def run(captured, fitter, reranker):
    held, floored, quiet = [], [], Silence()
    for i in sorted({s.conversation for s in captured}):
        m = fitter([s for s in captured if s.conversation != i])
        for s in captured:
            if s.conversation != i:
                continue
            for floor, out in ((0.0, held), (m.floor, floored)):
                order = reranker.order(s, m, floor)[:K]
                if s.evidence:
                    out.append(score_question([s.turns[j] for j in order], s.evidence, s.category))
                elif floor:
                    if s.category == ADVERSARIAL:
                        quiet.adversarial_asked += 1; quiet.adversarial_silent += not order
                    else:
                        quiet.never_said_asked += 1; quiet.never_said_silent += not order
    o, f = summarise(held), summarise(floored)
    cat = by_category(held)
    return (f"r@1 {o.recall[1]:.3f} r@5 {o.recall[5]:.3f} r@10 {o.recall[10]:.3f} hit@1 {o.hit[1]:.3f} | "
            + " ".join(f"{c}:{m.recall[10]:.3f}" for c, m in cat.items())
            + f" | floored r@10 {f.recall[10]:.3f} silent adv {quiet.adversarial_silent}/{quiet.adversarial_asked} never {quiet.never_said_silent}/{quiet.never_said_asked}")


fit = lambda t, o=ORDER, r=REL: crossval.fit_model(t, order_features=o, relevance_features=r)
for variant in ("nostop", "all"):
    cap = load(variant)
    print(f"[{variant}] held-out (leave one conversation out); per category r@10 (1 multi-hop, 2 temporal, 3 open, 4 single)")
    for name, fitter, rr in (
        ("baseline", fit, Rerank()),
        ("order+maxsim", lambda t: fit(t, ORDER + ("maxsim",)), Rerank()),
        ("order+rel+maxsim", lambda t: fit(t, ORDER + ("maxsim",), REL + ("maxsim",)), Rerank()),
        ("rerank top5", fit, Rerank(5)),
        ("rerank top10", fit, Rerank(10)),
        ("rerank top20", fit, Rerank(20)),
    ):
        if variant == "all" and name == "baseline":
            continue
        print(f"  {name:<18}", run(cap, fitter, rr))
