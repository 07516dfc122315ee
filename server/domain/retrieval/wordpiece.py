"""Counting tokens as the local model reads them, to size knowledge chunks to its window.

`WordPieceCounter` wraps the model's own tokenizer (the embedder hands it over, pinned as
the model is: `embedders.LocalEmbedder.token_counter`).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["WordPieceCounter"]

# What BERT's pre-tokenizer makes of an ASCII line once lowercased: runs of letters and
# digits, and each punctuation character alone (ASCII 33-47, 58-64, 91-96, 123-126).
_ASCII_PIECES = re.compile(r"[a-z0-9]+|[!-/:-@\[-`{-~]")
_ASCII_PIECES_AND_BREAKS = re.compile(r"[a-z0-9]+|[!-/:-@\[-`{-~]|\n")
# Lines the shortcut leaves to the tokenizer: control characters (its normaliser drops
# them) and the text of a special token (read as that one token).
_TOKENIZER_ONLY = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]|\[(?:PAD|UNK|CLS|SEP|MASK)\]", re.I)
_WORD_CACHE_SIZE = 200_000


class WordPieceCounter:
    """Counts tokens as the local model reads them, to size knowledge chunks: its own
    tokenizer (pinned like the model), without truncation; the model itself is not loaded.

    Counting is the CPU a put spends beyond chunking, so ASCII lines take a shortcut with
    the same result: split as BERT's pre-tokenizer splits them, each distinct word's pieces
    counted once by the tokenizer and remembered (words repeat, in prose and in code). Other
    lines go to the tokenizer whole."""

    overhead = 2  # [CLS] and [SEP]

    def __init__(self, load: Callable[[], Any], window: int) -> None:
        """``load`` gives the model's tokenizer without truncation or padding (called once,
        on first use; it raises what the embedder raises when the file is wrong)."""
        self.window = window
        self._load = load
        self._lock = threading.Lock()
        self._tokenizer: Any = None
        self._pieces: dict[str, int] = {}

    def _loaded(self) -> Any:
        with self._lock:
            if self._tokenizer is None:
                self._tokenizer = self._load()
            return self._tokenizer

    def count(self, texts: Sequence[str]) -> list[int]:
        """Tokens of each text, special tokens not counted."""
        tokenizer = self._loaded()
        joined = "\n".join(texts)
        if (
            joined.isascii()
            and joined.count("\n") == len(texts) - 1
            and not _TOKENIZER_ONLY.search(joined)
        ):
            return self._ascii_lines(tokenizer, joined)
        counts = [0] * len(texts)
        whole: list[int] = []  # texts for the tokenizer itself
        split: list[tuple[int, list[str]]] = []
        for i, text in enumerate(texts):
            if text.isascii() and not _TOKENIZER_ONLY.search(text):
                split.append((i, _ASCII_PIECES.findall(text.lower())))
            else:
                whole.append(i)
        known = self._known(tokenizer, {w for _, words in split for w in words})
        for i, words in split:
            counts[i] = sum(map(known.__getitem__, words))
        if whole:
            batch = tokenizer.encode_batch_fast([texts[i] for i in whole], add_special_tokens=False)
            for i, e in zip(whole, batch, strict=True):
                counts[i] = len(e)
        return counts

    def _ascii_lines(self, tokenizer: Any, joined: str) -> list[int]:
        """The count of each line of ``joined`` (ASCII, no control character or special
        token text): one split of the whole text, a line break a piece of its own that
        counts -1, and the sums between breaks taken with numpy."""
        pieces = _ASCII_PIECES_AND_BREAKS.findall(joined.lower())
        known = self._known(tokenizer, set(pieces) - {"\n"})
        known["\n"] = -1
        counts = np.fromiter(map(known.__getitem__, pieces), dtype=np.int64, count=len(pieces))
        breaks = np.flatnonzero(counts < 0)
        sums = np.concatenate(([0], np.cumsum(np.maximum(counts, 0))))
        starts = np.concatenate(([0], breaks + 1))
        ends = np.concatenate((breaks, [len(pieces)]))
        per_line: list[int] = (sums[ends] - sums[starts]).tolist()
        return per_line

    def _known(self, tokenizer: Any, words: set[str]) -> dict[str, int]:
        """Each word's count of pieces, from the cache or (once) from the tokenizer; a
        snapshot, as another chunking thread may clear the cache meanwhile."""
        cache, known = self._pieces, {}
        missing = []
        for word in words:
            n = cache.get(word)
            if n is None:
                missing.append(word)
            else:
                known[word] = n
        if missing:
            if len(cache) + len(missing) > _WORD_CACHE_SIZE:
                cache.clear()
            batch = tokenizer.encode_batch_fast(missing, add_special_tokens=False)
            for word, e in zip(missing, batch, strict=True):
                known[word] = cache[word] = len(e)
        return known

    def offsets(self, text: str) -> list[tuple[int, int]]:
        """(start, end) character offsets of each token of ``text``."""
        offsets: list[tuple[int, int]] = (
            self._loaded().encode(text, add_special_tokens=False).offsets
        )
        return offsets
