"""MiniLM per-token vectors (unit length) and MaxSim, from the shipped int8 ONNX model."""
import re
import numpy as np
from brain.server.domain.retrieval.embedders import LocalEmbedder

STOP = frozenset((
    "what which when where who whom whose why how does do did is are was were the a an of to "
    "in on for and or with by from at as our we you your i it its this that there be can "
    "could should would will my me us has have had if so not any some about into than then "
    "they them their he she his her him been being am".split()))
_PUNCT = re.compile(r"^[^\w]+$")


class Tokens:
    def __init__(self, max_tokens=256):
        self.e = LocalEmbedder(max_tokens=max_tokens)
        self.e._load()
        self.tok = self.e._tokenizer
        self.sess = self.e._session

    def encode(self, texts, batch=16):
        """Per text: (unit token vectors [T,384] without special tokens, token strings)."""
        out = [None] * len(texts)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for s in range(0, len(order), batch):
            idx = order[s:s + batch]
            enc = self.tok.encode_batch([texts[i] for i in idx])
            ids = np.array([e.ids for e in enc], dtype=np.int64)
            mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
            h = self.sess.run(["last_hidden_state"], {"input_ids": ids, "attention_mask": mask,
                              "token_type_ids": np.zeros_like(ids)})[0]
            for j, i in enumerate(idx):
                e = enc[j]
                keep = [t for t in range(len(e.ids)) if e.attention_mask[t] and not e.special_tokens_mask[t]]
                v = h[j, keep]
                v = v / np.clip(np.linalg.norm(v, axis=1, keepdims=True), 1e-9, None)
                out[i] = (v.astype(np.float32), [e.tokens[t] for t in keep])
        return out


def query_keep(tokens, stop=True):
    """Indices of query tokens to score: no punctuation; no stop words (whole words) if stop."""
    keep = []
    for i, t in enumerate(tokens):
        if _PUNCT.match(t):
            continue
        if stop and t in STOP:
            continue
        keep.append(i)
    return keep or list(range(len(tokens)))


def maxsim(q, p, keep=None):
    qv = q if keep is None else q[keep]
    if len(p) == 0 or len(qv) == 0:
        return 0.0
    return float((qv @ p.T).max(axis=1).mean())
