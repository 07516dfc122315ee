import pickle, sys
import numpy as np
sys.path.insert(0, "/work/wt-maxsim/exp")
from tokens import Tokens, query_keep, maxsim
T = Tokens()
for name in ("ks", "kv"):
    rows = pickle.load(open(f"/tmp/maxsim/{name}_ms.pkl", "rb"))
    texts = sorted({t for r in rows for t in r["texts"]})
    enc = dict(zip(texts, T.encode(texts)))
    q8 = {t: np.round(v * 127).astype(np.int8) for t, (v, _) in enc.items()}
    for r in rows:
        (qv, qt), = T.encode([r["question"]])
        keep = query_keep(qt)
        r["ms"]["q8"] = np.array([maxsim(qv, q8[t].astype(np.float32) / 127, keep) for t in r["texts"]])
        r["ms"]["bin"] = np.array([maxsim(np.sign(qv), np.sign(enc[t][0]), keep) / 384 for t in r["texts"]])
        d = np.abs(r["ms"]["q8"] - r["ms"]["nostop"]).max() if len(r["texts"]) else 0
        r.setdefault("dq8", d)
    print(name, "max |q8 - fp32| maxsim", max(r["dq8"] for r in rows))
    pickle.dump(rows, open(f"/tmp/maxsim/{name}_ms.pkl", "wb"))
