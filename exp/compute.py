"""Add MaxSim scores to a capture: rows[i]['ms'] = {variant: array per candidate}."""
import pickle, sys, time
import numpy as np
sys.path.insert(0, "/work/wt-maxsim/exp")
from tokens import Tokens, query_keep, maxsim

src, dst = sys.argv[1], sys.argv[2]
rows = pickle.load(open(src, "rb"))
T = Tokens()
texts = sorted({t for r in rows for t in r["texts"]})
t0 = time.perf_counter()
enc = dict(zip(texts, T.encode(texts)))
print(f"{len(texts)} passages encoded in {time.perf_counter()-t0:.1f} s", flush=True)
qs = sorted({r["question"] for r in rows})
qenc = dict(zip(qs, T.encode(qs)))
for r in rows:
    qv, qt = qenc[r["question"]]
    keep_stop = query_keep(qt, stop=True)
    keep_all = query_keep(qt, stop=False)
    r["ms"] = {
        "all": np.array([maxsim(qv, enc[t][0], keep_all) for t in r["texts"]]),
        "nostop": np.array([maxsim(qv, enc[t][0], keep_stop) for t in r["texts"]]),
    }
pickle.dump(rows, open(dst, "wb"))
print("done", len(rows))
