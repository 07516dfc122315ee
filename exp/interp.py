import sys; sys.path.insert(0, "/work/wt-maxsim/exp")
from score_knowledge import *
for variant in ("nostop",):
    ks = [r["cand"] for r in load("/tmp/maxsim/ks_ms.pkl", variant)]
    kvr = load("/tmp/maxsim/kv_ms.pkl", variant); kv = [r["cand"] for r in kvr]
    for k in (5, 10):
        for w in (1, 2, 4, 8, 16, 32, None):
            d, h, m = cv(ks, fit, lambda: Rerank(k, w))
            v = Rerank(k, w)
            for s in kv: v.add(s, m)
            tag = f"top{k} z+{w}*ms"
            print(line(f"{tag} dev-cv", d)); print(line(f"{tag} held-out", h)); print(line(f"{tag} VALIDATION", v))
    # win/loss at rank 1, validation, top5 rerank vs baseline
    m = fit([s for s in ks if s.conversation >= 0])
    b, r = Rerank(), Rerank(5)
    won = lost = 0
    for s in kv:
        if not s.evidence: continue
        o1, o2 = b.order(s, m, m.floor), r.order(s, m, m.floor)
        a1 = bool(o1) and bool(s.turns[o1[0]]); a2 = bool(o2) and bool(s.turns[o2[0]])
        won += a2 and not a1; lost += a1 and not a2
    print("validation top5 rerank vs baseline at rank 1: won", won, "lost", lost)
    for part in ("dev", "held"):
        won = lost = 0
        for s in ks:
            if not s.evidence or (s.conversation >= 0) != (part == "dev"): continue
            o1, o2 = b.order(s, m, m.floor), r.order(s, m, m.floor)
            a1 = bool(o1) and bool(s.turns[o1[0]]); a2 = bool(o2) and bool(s.turns[o2[0]])
            won += a2 and not a1; lost += a1 and not a2
        print(part, "(dev: in-sample fit) won", won, "lost", lost)
