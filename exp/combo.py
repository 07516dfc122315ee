import sys; sys.path.insert(0, "/work/wt-maxsim/exp")
from score_knowledge import *
for variant in ("nostop", "q8", "bin"):
    ks = [r["cand"] for r in load("/tmp/maxsim/ks_ms.pkl", variant)]
    kv = [r["cand"] for r in load("/tmp/maxsim/kv_ms.pkl", variant)]
    for name, fitter, make in (("rerank top5", fit, lambda: Rerank(5)),
                               ("order+maxsim, rerank top5", lambda t: fit(t, ORDER + ("maxsim",)), lambda: Rerank(5))):
        d, h, m = cv(ks, fitter, make)
        v = make()
        for s in kv: v.add(s, m)
        tag = f"{name} [{variant}]"
        print(line(f"{tag} dev-cv", d)); print(line(f"{tag} held-out", h)); print(line(f"{tag} VALIDATION", v))
