"""Server settings: flags override ``BRAIN_*`` environment variables override defaults."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from brain.server.domain.validation import MAX_CANDIDATE_TTL
from brain.server.runtime.cpus import usable_cpus


def default_data_dir() -> Path:
    return Path(platformdirs.user_data_dir("shared-brain"))


@dataclass(frozen=True)
class Settings:
    listen: str = "127.0.0.1:50051"
    database_url: str | None = None
    read_database_url: str | None = None
    data_dir: Path = Path()
    pepper_file: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None
    log_level: str = "info"
    log_format: str = "json"
    rate_limit: float = 50.0
    rate_burst: int = 100
    max_message_bytes: int = 4 * 1024 * 1024
    max_page_size: int = 100
    statement_timeout_ms: int = 10_000
    grace_seconds: float = 10.0
    health_interval_seconds: float = 2.0
    embedder: str = "local"
    tenant_embedders: str | None = None  # "acme=multilingual,globex=local"
    openai_url: str | None = None
    openai_model: str | None = None
    openai_api_key: str | None = None
    embedding_dimension: int | None = None
    reranker_url: str | None = None
    reranker_model: str | None = None
    reranker_api_key: str | None = None
    reranker_timeout_seconds: float = 5.0
    reranker_top_n: int = 20
    # Optional graph extraction (issue 19): an OpenAI-compatible chat endpoint.
    graph_extract_url: str | None = None
    graph_extract_model: str | None = None
    graph_extract_api_key: str | None = None
    graph_extract_timeout_seconds: float = 30.0
    # An optional model judge of detected conflicts (issue 30): advice only.
    conflict_judge_url: str | None = None
    conflict_judge_model: str | None = None
    conflict_judge_api_key: str | None = None
    # Weight of the entity graph lane in fusion; None: the shipped RetrievalParams value.
    graph_lane_weight: float | None = None
    # The second retrieval round (two hops): names it may add, and how far its vector moves
    # toward the best hits'; None: the shipped value (0: off).
    hop_entities: int | None = None
    hop_vector_weight: float | None = None
    # Knowledge search with the local embedder reads its best chunks' sentences (issue 31:
    # meant to silence more questions no passage answers, for about twice the search
    # latency). Off by default: under a deterministic refit it silenced 2 more dev questions
    # with one tie order and 1 fewer with the other (docs: Knowledge base); False: the
    # unread hybrid model decides.
    knowledge_reading: bool = False
    # Knowledge search with the local embedder reorders its first 5 chunks by late
    # interaction (MaxSim over the model's token vectors, the chunks' stored by the filler,
    # `knowledge.late`): hit@1 up on every knowledge set, nothing else moved, for little
    # latency (docs: Knowledge base). False: the fused order.
    knowledge_late_rerank: bool = True
    max_candidate_ttl_days: int = MAX_CANDIDATE_TTL.days
    proposals_per_hour: int = 100
    dev_key_file: Path | None = None
    # host:port for Prometheus /metrics; None: no metrics endpoint.
    metrics_listen: str | None = None
    # Test-only: drop the application's visibility predicate to prove RLS alone isolates.
    app_filter: bool = True
    # Server processes on the listen port (runtime/workers.py); reuse_port is set for them.
    workers: int = 1
    reuse_port: bool = False
    # Set by the parent for its workers: the bucket file every worker's rate limit shares,
    # and the host:port where the parent serves /metrics from the values the workers write
    # (None: no metrics).
    rate_limit_file: Path | None = None
    metrics_in_parent: str | None = None


def _env(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(f"BRAIN_{name}")
    return value if value not in (None, "") else default


def add_server_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--listen",
        default=_env("LISTEN", "127.0.0.1:50051"),
        help="host:port to serve on (BRAIN_LISTEN)",
    )
    parser.add_argument(
        "--workers",
        type=_positive_int,
        default=_env("WORKERS") or str(usable_cpus()),
        help="server processes sharing the port; default: the CPUs this process may use "
        "(its CPU affinity, bounded by a cgroup CPU quota) (BRAIN_WORKERS)",
    )
    parser.add_argument(
        "--database-url",
        default=_env("DATABASE_URL"),
        help="PostgreSQL URL; unset: embedded PostgreSQL (BRAIN_DATABASE_URL)",
    )
    parser.add_argument(
        "--read-database-url",
        default=_env("READ_DATABASE_URL"),
        help="a streaming replica for Search, List, Get, History, Export and BuildContext "
        "(BRAIN_READ_DATABASE_URL)",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=Path(_env("DATA_DIR") or default_data_dir()),
        help="embedded PostgreSQL data and pepper (BRAIN_DATA_DIR)",
    )
    parser.add_argument(
        "--pepper-file",
        type=Path,
        default=_opt_path("PEPPER_FILE"),
        help="file with the key-hashing pepper (BRAIN_PEPPER_FILE)",
    )
    parser.add_argument("--tls-cert", type=Path, default=_opt_path("TLS_CERT"))
    parser.add_argument("--tls-key", type=Path, default=_opt_path("TLS_KEY"))
    parser.add_argument(
        "--tls-client-ca",
        type=Path,
        default=_opt_path("TLS_CLIENT_CA"),
        help="require client certificates signed by this CA (mTLS)",
    )
    parser.add_argument("--log-level", default=_env("LOG_LEVEL", "info"))
    parser.add_argument(
        "--log-format", choices=["json", "console"], default=_env("LOG_FORMAT", "json")
    )
    parser.add_argument(
        "--rate-limit",
        type=float,
        default=float(_env("RATE_LIMIT", "50") or 50),
        help="requests per second per key (BRAIN_RATE_LIMIT)",
    )
    parser.add_argument("--rate-burst", type=int, default=int(_env("RATE_BURST", "100") or 100))
    parser.add_argument(
        "--statement-timeout-ms",
        type=int,
        default=int(_env("STATEMENT_TIMEOUT_MS", "10000") or 10000),
    )
    parser.add_argument(
        "--health-interval",
        type=float,
        default=float(_env("HEALTH_INTERVAL", "2") or 2),
        help="seconds between database probes that drive gRPC health (BRAIN_HEALTH_INTERVAL)",
    )
    parser.add_argument(
        "--proposals-per-hour",
        type=int,
        default=int(_env("PROPOSALS_PER_HOUR", "100") or 100),
        help="candidates one key may propose per hour (BRAIN_PROPOSALS_PER_HOUR)",
    )
    parser.add_argument(
        "--max-candidate-ttl-days",
        type=int,
        default=int(_env("MAX_CANDIDATE_TTL_DAYS") or MAX_CANDIDATE_TTL.days),
        help="longest review window a proposal may ask for (BRAIN_MAX_CANDIDATE_TTL_DAYS)",
    )
    parser.add_argument(
        "--metrics-listen",
        default=_env("METRICS_LISTEN"),
        help="host:port to serve Prometheus metrics on (at /metrics); off by default, "
        "never the gRPC address (BRAIN_METRICS_LISTEN)",
    )
    add_embedder_arguments(parser)
    add_reranker_arguments(parser)
    add_graph_extract_arguments(parser)
    parser.add_argument(
        "--dev-key-file",
        type=Path,
        default=_opt_path("DEV_KEY_FILE"),
        help="embedded mode: write a local dev key here (mode 0600) on first start",
    )


def add_embedder_arguments(parser: argparse.ArgumentParser) -> None:
    """Embedder flags, shared by brain-server and brain-admin (backfill)."""
    parser.add_argument(
        "--embedder",
        default=_env("EMBEDDER", "local"),
        choices=["none", "local", "multilingual", "openai"],
        help="none (lexical only) | local (MiniLM on CPU, English) | multilingual "
        "(multilingual-e5-small on CPU, about 100 languages) | openai (BRAIN_EMBEDDER)",
    )
    parser.add_argument(
        "--tenant-embedder",
        action="append",
        metavar="TENANT=EMBEDDER",
        default=None,
        help="this tenant embeds with another of the embedders above, e.g. "
        "acme=multilingual (repeatable; BRAIN_TENANT_EMBEDDERS=acme=multilingual,...)",
    )
    parser.add_argument(
        "--openai-url",
        default=_env("OPENAI_URL"),
        help="OpenAI-compatible endpoint, e.g. http://localhost:11434 (BRAIN_OPENAI_URL)",
    )
    parser.add_argument("--openai-model", default=_env("OPENAI_MODEL"), help="BRAIN_OPENAI_MODEL")
    parser.add_argument(
        "--embedding-dimension",
        type=int,
        default=int(_env("EMBEDDING_DIMENSION", "0") or 0) or None,
        help="vector size of the embedder's model (BRAIN_EMBEDDING_DIMENSION)",
    )


def embedder_settings(args: argparse.Namespace) -> dict[str, object]:
    """The Settings fields for the embedder; the API key comes only from the environment."""
    return {
        "embedder": args.embedder,
        "tenant_embedders": ",".join(args.tenant_embedder)
        if args.tenant_embedder
        else _env("TENANT_EMBEDDERS"),
        "openai_url": args.openai_url,
        "openai_model": args.openai_model,
        "openai_api_key": _env("OPENAI_API_KEY"),
        "embedding_dimension": args.embedding_dimension,
    }


def add_reranker_arguments(parser: argparse.ArgumentParser) -> None:
    """Reranker flags (brain-server and brain-eval); the key comes from the environment."""
    parser.add_argument(
        "--reranker-url",
        default=_env("RERANKER_URL"),
        help="Cohere-style /v1/rerank endpoint root, e.g. http://localhost:8080; unset: "
        "no reranking (BRAIN_RERANKER_URL)",
    )
    parser.add_argument(
        "--reranker-model", default=_env("RERANKER_MODEL"), help="BRAIN_RERANKER_MODEL"
    )
    parser.add_argument(
        "--reranker-timeout",
        type=float,
        default=float(_env("RERANKER_TIMEOUT", "5") or 5),
        help="seconds before a search gives up on the reranker (BRAIN_RERANKER_TIMEOUT)",
    )
    parser.add_argument(
        "--reranker-top-n",
        type=int,
        default=int(_env("RERANKER_TOP_N", "20") or 20),
        help="how many fused hits the reranker reorders (BRAIN_RERANKER_TOP_N)",
    )


def add_graph_extract_arguments(parser: argparse.ArgumentParser) -> None:
    """Optional entity/relation extraction into review candidates; key from the environment."""
    parser.add_argument(
        "--graph-extract-url",
        default=_env("GRAPH_EXTRACT_URL"),
        help="OpenAI-compatible chat endpoint root that proposes each saved memory's entities "
        "and relations for review; unset: no extraction (BRAIN_GRAPH_EXTRACT_URL)",
    )
    parser.add_argument(
        "--graph-extract-model",
        default=_env("GRAPH_EXTRACT_MODEL"),
        help="BRAIN_GRAPH_EXTRACT_MODEL",
    )
    parser.add_argument(
        "--graph-extract-timeout",
        type=float,
        default=float(_env("GRAPH_EXTRACT_TIMEOUT", "30") or 30),
        help="seconds before extraction of one memory is given up (BRAIN_GRAPH_EXTRACT_TIMEOUT)",
    )
    parser.add_argument(
        "--conflict-judge-url",
        default=_env("CONFLICT_JUDGE_URL"),
        help="OpenAI-compatible chat endpoint root that advises on each detected conflict "
        "(the verdict is shown to reviewers; it decides nothing); unset: no judge "
        "(BRAIN_CONFLICT_JUDGE_URL; the key from BRAIN_CONFLICT_JUDGE_API_KEY)",
    )
    parser.add_argument(
        "--conflict-judge-model",
        default=_env("CONFLICT_JUDGE_MODEL"),
        help="BRAIN_CONFLICT_JUDGE_MODEL",
    )
    parser.add_argument(
        "--graph-lane-weight",
        type=float,
        default=float(_env("GRAPH_LANE_WEIGHT", "-1") or -1),
        help="weight of the entity graph lane in search fusion, 0 = off (default: the "
        "shipped value; BRAIN_GRAPH_LANE_WEIGHT)",
    )
    parser.add_argument(
        "--hop-entities",
        type=int,
        default=int(_env("HOP_ENTITIES", "-1") or -1),
        help="names of the first round's best hits a second lexical round may add to the "
        "query (two hops); 0 = no such round, the default (BRAIN_HOP_ENTITIES)",
    )
    _switch(
        parser, "knowledge-reading",
        "on: with the local embedder, knowledge search embeds the sentences of its best "
        "2 chunks to tell an answer from a passage that only shares words (about twice the "
        "latency; its gain did not hold when ties were ranked another way); off, the "
        "default: the hybrid model alone",
    )  # fmt: skip
    _switch(
        parser, "knowledge-late-rerank",
        "on, the default: with the local embedder and no --reranker-url, knowledge search "
        "reorders its first 5 chunks by late interaction (MaxSim of the model's token "
        "vectors, the chunks' stored with their vectors); off: the fused order",
        default="on",
    )  # fmt: skip
    parser.add_argument(
        "--hop-vector-weight",
        type=float,
        default=float(_env("HOP_VECTOR_WEIGHT", "-1") or -1),
        help="a second semantic round with the query vector plus this much of the mean "
        "vector of the first round's best hits (two hops); 0 = no such round, the default "
        "(BRAIN_HOP_VECTOR_WEIGHT)",
    )


def _switch(parser: argparse.ArgumentParser, flag: str, help: str, default: str = "off") -> None:
    """An ``--flag on|off`` (default off unless said) read from ``BRAIN_FLAG`` too."""
    env = flag.upper().replace("-", "_")
    parser.add_argument(
        f"--{flag}",
        type=_on_off,
        metavar="{on,off}",
        default=_env(env, default) or default,
        help=f"{help} (BRAIN_{env})",
    )


def _on_off(value: str) -> bool:
    """``on`` or ``off`` (from the flag or the environment alike)."""
    if value not in ("on", "off"):
        raise argparse.ArgumentTypeError(f"{value!r} is not on or off")
    return value == "on"


def graph_extract_settings(args: argparse.Namespace) -> dict[str, object]:
    return {
        "graph_lane_weight": args.graph_lane_weight if args.graph_lane_weight >= 0 else None,
        "hop_entities": args.hop_entities if args.hop_entities >= 0 else None,
        "hop_vector_weight": args.hop_vector_weight if args.hop_vector_weight >= 0 else None,
        "knowledge_reading": args.knowledge_reading,
        "knowledge_late_rerank": args.knowledge_late_rerank,
        "graph_extract_url": args.graph_extract_url,
        "graph_extract_model": args.graph_extract_model,
        "graph_extract_api_key": _env("GRAPH_EXTRACT_API_KEY"),
        "graph_extract_timeout_seconds": args.graph_extract_timeout,
        "conflict_judge_url": args.conflict_judge_url,
        "conflict_judge_model": args.conflict_judge_model,
        "conflict_judge_api_key": _env("CONFLICT_JUDGE_API_KEY"),
    }


def reranker_settings(args: argparse.Namespace) -> dict[str, object]:
    """The Settings fields for the reranker; the API key comes only from the environment."""
    return {
        "reranker_url": args.reranker_url,
        "reranker_model": args.reranker_model,
        "reranker_api_key": _env("RERANKER_API_KEY"),
        "reranker_timeout_seconds": args.reranker_timeout,
        "reranker_top_n": args.reranker_top_n,
    }


def _positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a positive whole number")
    return number


def _opt_path(name: str) -> Path | None:
    value = _env(name)
    return Path(value) if value else None


def settings_from_args(args: argparse.Namespace) -> Settings:
    return Settings(
        listen=args.listen,
        workers=args.workers,
        database_url=args.database_url,
        read_database_url=args.read_database_url,
        data_dir=args.data_dir,
        pepper_file=args.pepper_file,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_client_ca=args.tls_client_ca,
        log_level=args.log_level,
        log_format=args.log_format,
        rate_limit=args.rate_limit,
        rate_burst=args.rate_burst,
        statement_timeout_ms=args.statement_timeout_ms,
        health_interval_seconds=args.health_interval,
        proposals_per_hour=args.proposals_per_hour,
        max_candidate_ttl_days=args.max_candidate_ttl_days,
        dev_key_file=args.dev_key_file,
        metrics_listen=args.metrics_listen,
        **embedder_settings(args),  # type: ignore[arg-type]
        **reranker_settings(args),  # type: ignore[arg-type]
        **graph_extract_settings(args),  # type: ignore[arg-type]
    )
