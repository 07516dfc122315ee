import pickle, statistics, sys, time
sys.path.insert(0, "/work/wt-maxsim/exp")
import numpy as np
from tokens import Tokens, query_keep, maxsim
rows = pickle.load(open("/tmp/maxsim/ks.pkl", "rb"))
texts = sorted({t for r in rows for t in r["texts"]}, key=lambda t: abs(len(t) - 1000))
near = texts[:50]
print("50 passages, chars mean", statistics.mean(map(len, near)), "min", min(map(len, near)), "max", max(map(len, near)))
T = Tokens()
T.encode(["warm up"])
q = "How do I roll back a failed deploy of the billing service?"
def run(n, batch):
    t = time.perf_counter()
    (qv, qt), = T.encode([q])
    enc = T.encode(near[:n], batch=batch)
    keep = query_keep(qt)
    s = [maxsim(qv, v, keep) for v, _ in enc]
    return (time.perf_counter() - t) * 1000, sum(len(v) for v, _ in enc) / n
for n, batch in ((50, 16), (50, 50), (20, 20), (10, 10), (5, 5), (5, 1)):
    times = [run(n, batch) for _ in range(5)]
    ms = sorted(t for t, _ in times)
    print(f"{n} passages (batch {batch}): median {ms[2]:.0f} ms, min {ms[0]:.0f} ms; tokens/passage {times[0][1]:.0f}")
# the MaxSim arithmetic alone with stored vectors
(qv, qt), = T.encode([q]); enc = T.encode(near); keep = query_keep(qt)
t = time.perf_counter()
for _ in range(100): [maxsim(qv, v, keep) for v, _ in enc]
print(f"MaxSim arithmetic, 50 stored passages: {(time.perf_counter()-t)*10:.2f} ms")
toks = np.mean([len(v) for v, _ in enc])
print(f"storage per chunk: {toks:.0f} tokens x 384 = {toks*384/1024:.0f} KB int8, {toks*384*2/1024:.0f} KB fp16 (chunk vector: 1.5 KB fp32)")
