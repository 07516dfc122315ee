"""brain-server: the gRPC server, its startup checks and graceful shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import timedelta
from urllib.parse import urlsplit

import asyncpg
import grpc
import structlog
from grpc_health.v1 import _async as health_aio  # the asyncio servicer; health.aio is this
from grpc_health.v1 import health_pb2, health_pb2_grpc

from brain.authz import Limiter, RateLimiter, SharedRateLimiter
from brain.authz.interceptor import AuthorizationInterceptor
from brain.server.domain import validation
from brain.server.domain.audit import AuditLog
from brain.server.domain.conflicts.judge import HttpJudge
from brain.server.domain.graph.extraction import ExtractorError, build_extractor
from brain.server.domain.graph.reads import Graph
from brain.server.domain.knowledge import Knowledge
from brain.server.domain.knowledge.filler import ChunkFiller
from brain.server.domain.memories import Limits, Memories
from brain.server.domain.retrieval.embedders import (
    EMBEDDER_NAMES,
    Embedder,
    EmbedderError,
    InstrumentedEmbedder,
    build_embedder,
)
from brain.server.domain.retrieval.lanes import RetrievalParams
from brain.server.domain.retrieval.rerankers import RerankerError, build_reranker
from brain.server.domain.retrieval.routing import RoutedEmbedder, parse_tenant_embedders
from brain.server.domain.review import Review, ReviewLimits
from brain.server.domain.watch import close_feed
from brain.server.edge.audit import AuditServicer
from brain.server.edge.graph import GraphServicer
from brain.server.edge.identity import IdentityServicer
from brain.server.edge.knowledge import KnowledgeServicer
from brain.server.edge.memory import MemoryServicer
from brain.server.edge.review import ReviewServicer
from brain.server.runtime import embedded, ports
from brain.server.runtime.bootstrap import prepare_embedded
from brain.server.runtime.config import Settings
from brain.server.runtime.pepper import PepperError, load_pepper
from brain.server.runtime.startup import StartupError, serve_metrics, server_credentials
from brain.server.runtime.supervisor import DatabaseSupervisor
from brain.server.storage import migrate as migrations
from brain.server.storage.db import Database, UnsafeRole
from brain.server.telemetry import logs, metrics, tracing
from brain.v1 import (
    audit_pb2_grpc,
    graph_pb2_grpc,
    identity_pb2_grpc,
    knowledge_pb2_grpc,
    memory_pb2_grpc,
    review_pb2_grpc,
)

_log = structlog.get_logger("brain.server")
SERVICES = (
    "brain.v1.MemoryService",
    "brain.v1.ReviewService",
    "brain.v1.AuditService",
    "brain.v1.IdentityService",
    "brain.v1.GraphService",
    "brain.v1.KnowledgeService",
)


@dataclass
class RunningServer:
    server: grpc.aio.Server
    db: Database
    health: health_aio.HealthServicer
    port: int
    memories: Memories
    supervisor: DatabaseSupervisor
    knowledge: Knowledge | None = None  # the KnowledgeService's domain (puts, deletes)
    filler: ChunkFiller | None = None  # None with --embedder none
    embedded_pg: embedded.EmbeddedPostgres | None = None
    metrics_server: metrics.MetricsServer | None = None
    tracing_on: bool = False
    interceptor: AuthorizationInterceptor | None = None  # told when the drain begins
    stopped: asyncio.Event = field(default_factory=asyncio.Event)

    async def stop(self, grace: float = 10.0) -> None:
        """Refuse new calls, drain in-flight ones for up to ``grace`` s, then close."""
        if self.stopped.is_set():
            return
        self.stopped.set()
        await self.supervisor.stop()
        await self.health.enter_graceful_shutdown()
        metrics.SERVING.set(0)
        if self.interceptor is not None:
            self.interceptor.draining = True
        await close_feed(self.db)  # watch streams end now, not after the grace period
        await self.server.stop(grace)
        if self.filler is not None:
            await self.filler.stop()  # gives its claimed chunks back
        if self.metrics_server is not None:
            self.metrics_server.stop()
        for pool in (self.db.pool, self.db.replica):
            if pool is not None:
                metrics.POOLS.forget(pool)
        if self.tracing_on:
            tracing.shutdown()
        await self.db.close()
        if self.embedded_pg is not None:
            self.embedded_pg.stop()
        _log.info("server stopped")


async def open_database(settings: Settings) -> tuple[Database, embedded.EmbeddedPostgres | None]:
    """Connect as the app role: embedded (started and migrated here) or BRAIN_DATABASE_URL."""
    pg = None
    if settings.database_url is None:
        try:
            pg = embedded.start(settings.data_dir / "pg")
        except embedded.StartFailed as exc:
            raise StartupError(str(exc)) from exc
        await prepare_embedded(pg)
        dsn = pg.app_dsn
    else:
        dsn = settings.database_url
        parts = urlsplit(dsn)
        if parts.scheme not in ("postgres", "postgresql"):
            raise StartupError(
                f"the database URL (--database-url or BRAIN_DATABASE_URL) "
                f"{logs.redact_dsn(dsn)!r} is not a postgresql:// URL"
            )
    where = logs.redact_dsn(dsn)
    try:
        # Checked on a plain connection first: the pool's codecs need the migrated schema.
        schema = await asyncio.wait_for(migrations.status(dsn), timeout=15)
    except (OSError, asyncpg.PostgresError, TimeoutError, ValueError) as exc:
        raise StartupError(f"cannot connect to the database at {where}: {exc}") from exc
    if schema.unknown:
        # An older server on a newer schema could write rows the new code would misread.
        raise StartupError(f"{where}: {migrations.newer_schema_message(schema.unknown)}")
    missing = schema.pending
    if missing:
        raise StartupError(
            f"the database at {where} lacks {len(missing)} migration(s) (first: "
            f"{missing[0].version}_{missing[0].name}); run `brain-admin migrate` as the owner"
        )
    replica = settings.read_database_url
    if replica is not None and urlsplit(replica).scheme not in ("postgres", "postgresql"):
        raise StartupError(
            "the read database URL (--read-database-url or BRAIN_READ_DATABASE_URL) "
            f"{logs.redact_dsn(replica)!r} is not a postgresql:// URL"
        )
    try:
        db = await asyncio.wait_for(Database.connect(dsn, replica_dsn=replica), timeout=15)
    except (OSError, asyncpg.PostgresError, TimeoutError, ValueError) as exc:
        where = logs.redact_dsn(dsn) + (f" or {logs.redact_dsn(replica)}" if replica else "")
        raise StartupError(f"cannot connect to the database at {where}: {exc}") from exc
    try:
        await db.check_role_is_confined()
    except UnsafeRole as exc:
        await db.close()
        raise StartupError(str(exc)) from exc
    if not await db.text_match_is_leakproof():
        _log.warning(
            "lexical search cannot use its indexes under row-level security, so each "
            "search reads the whole table; a superuser can fix it once per database",
            run=migrations.MARK_TEXT_MATCH,
        )
    return db, pg


async def start_server(settings: Settings) -> RunningServer:
    """Open the database, build the gRPC server and start serving."""
    credentials = server_credentials(settings)
    try:
        pepper = load_pepper(
            settings.pepper_file, settings.data_dir, database_url=settings.database_url
        )
    except PepperError as exc:
        raise StartupError(str(exc)) from exc
    db, pg = await open_database(settings)
    try:
        return await _serve(settings, db, pg, pepper, credentials)
    except BaseException:
        await db.close()
        if pg is not None:
            pg.stop()
        raise


async def _serve(
    settings: Settings,
    db: Database,
    pg: embedded.EmbeddedPostgres | None,
    pepper: bytes,
    credentials: grpc.ServerCredentials | None,
) -> RunningServer:
    if settings.dev_key_file is not None and pg is not None:
        from brain.server.runtime.devkey import ensure_dev_key

        await ensure_dev_key(pg.owner_dsn, pepper, settings.dev_key_file)

    interceptor = AuthorizationInterceptor(
        db.lookup_key,
        pepper,
        rate_limiter=_rate_limiter(settings),
        touch_key=db.touch_key,
        check_request=validation.malformed,
        observer=metrics.RpcObserver(),
        # Past its statement timeout a call is stuck, not slow (a frozen database).
        max_call_seconds=settings.statement_timeout_ms / 1000 + 5,
    )
    options = [
        ("grpc.max_receive_message_length", settings.max_message_bytes),
        ("grpc.max_send_message_length", settings.max_message_bytes),
        # Workers share one port (runtime/workers.py); alone, a taken port is an error.
        ("grpc.so_reuseport", 1 if settings.reuse_port else 0),
    ]
    server = grpc.aio.server(interceptors=[interceptor], options=options)
    try:
        embedder: Embedder = build_embedder(
            settings.embedder,
            openai_url=settings.openai_url,
            openai_model=settings.openai_model,
            openai_api_key=settings.openai_api_key,
            dimension=settings.embedding_dimension,
        )
    except EmbedderError as exc:
        raise StartupError(f"embedder: {exc}") from exc
    embedder = InstrumentedEmbedder(embedder)
    tenant_embedders = await _tenant_embedders(db, settings, embedder)
    try:
        reranker = build_reranker(
            settings.reranker_url,
            settings.reranker_model,
            api_key=settings.reranker_api_key,
            timeout=settings.reranker_timeout_seconds,
            top_n=settings.reranker_top_n,
        )
    except RerankerError as exc:
        raise StartupError(f"reranker: {exc}") from exc
    try:
        extractor = build_extractor(
            settings.graph_extract_url,
            settings.graph_extract_model,
            api_key=settings.graph_extract_api_key,
            timeout=settings.graph_extract_timeout_seconds,
        )
    except ExtractorError as exc:
        raise StartupError(f"graph extraction: {exc}") from exc
    judge = None
    if settings.conflict_judge_url:
        if not settings.conflict_judge_model:
            raise StartupError("conflict judge: a URL needs a model name (--conflict-judge-model)")
        judge = HttpJudge(
            url=settings.conflict_judge_url,
            model=settings.conflict_judge_model,
            api_key=settings.conflict_judge_api_key,
            timeout=settings.graph_extract_timeout_seconds,
        )
    dimension = await db.embedding_dimension()
    for name, one in [(settings.embedder, embedder), *tenant_embedders.values()]:
        if one.dimension not in (0, dimension):
            raise StartupError(
                f"the {name} embedder makes {one.dimension}-dimensional vectors but "
                f"the database stores {dimension}; run `brain-admin embeddings set-dimension "
                f"{one.dimension}` (then `brain-admin embeddings backfill`)"
            )
    if tenant_embedders:
        embedder = RoutedEmbedder(
            embedder, {tenant: one for tenant, (_, one) in tenant_embedders.items()}
        )
    distributed = await db.is_distributed()
    db.notify_apart = distributed  # storage/db.py: Citus replays a SET LOCAL's whole string
    memories = Memories(
        db,
        pepper,
        Limits(
            max_page_size=settings.max_page_size,
            statement_timeout_ms=settings.statement_timeout_ms,
            app_filter=settings.app_filter,
            distributed=distributed,
        ),
        embedder=embedder,
        embedding_dimension=dimension,
        reranker=reranker,
        retrieval_params=retrieval_params(settings),
    )
    memories.extractor = extractor
    memories.judge = judge
    memory_pb2_grpc.add_MemoryServiceServicer_to_server(MemoryServicer(memories), server)
    review = Review(
        memories,
        ReviewLimits(
            max_candidate_ttl=timedelta(days=settings.max_candidate_ttl_days),
            proposals_per_hour=settings.proposals_per_hour,
        ),
    )
    review_pb2_grpc.add_ReviewServiceServicer_to_server(ReviewServicer(review), server)
    audit_pb2_grpc.add_AuditServiceServicer_to_server(
        AuditServicer(AuditLog(db, memories.tokens, settings.statement_timeout_ms)), server
    )
    identity_pb2_grpc.add_IdentityServiceServicer_to_server(IdentityServicer(), server)
    graph_pb2_grpc.add_GraphServiceServicer_to_server(GraphServicer(Graph(memories)), server)
    knowledge = Knowledge(memories)
    if not settings.knowledge_reading:  # (off by default: docs, Knowledge base)
        knowledge.searching.reading_models = {}
    if not settings.knowledge_late_rerank:  # (on by default: docs, Knowledge base)
        knowledge.searching.late_top = 0
    knowledge_pb2_grpc.add_KnowledgeServiceServicer_to_server(KnowledgeServicer(knowledge), server)
    health_servicer = health_aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    try:
        if not settings.reuse_port:  # a worker joins its parent's group, checked there
            ports.ensure_free(settings.listen)
    except OSError as exc:
        raise StartupError(str(exc)) from exc
    try:
        if credentials is None:
            port = server.add_insecure_port(settings.listen)
        else:
            port = server.add_secure_port(settings.listen, credentials)
    except RuntimeError as exc:
        raise StartupError(
            f"cannot listen on {settings.listen}: the address is in use or not valid"
        ) from exc
    if port == 0:
        raise StartupError(
            f"cannot listen on {settings.listen}: the address is in use or not valid"
        )
    await server.start()
    try:
        metrics_server = serve_metrics(settings, port)
    except StartupError:
        await server.stop(None)
        raise
    tracing_on = tracing.configure() is not None
    metrics.POOLS.watch("primary", db.pool)
    if db.replica is not None:
        metrics.POOLS.watch("replica", db.replica)
    for service in ("", *SERVICES):
        await health_servicer.set(service, health_pb2.HealthCheckResponse.SERVING)
    metrics.SERVING.set(1)
    supervisor = DatabaseSupervisor(
        db, health_servicer, SERVICES, pg=pg, interval=settings.health_interval_seconds
    )
    supervisor.start()
    filler = None
    if embedder.dimension or tenant_embedders:
        filler = ChunkFiller(db.pool, embedder, memories.embedding_model)
        knowledge.filler = filler
        filler.start()
    _log.info(
        "serving",
        listen=settings.listen,
        port=port,
        tls=credentials is not None,
        mtls=settings.tls_client_ca is not None,
        database="embedded" if pg is not None else logs.redact_dsn(settings.database_url or ""),
        # host:port of /metrics, served here or (with --workers) by the parent process
        metrics=metrics.address(settings.metrics_listen, metrics_server.port)
        if metrics_server is not None and settings.metrics_listen
        else settings.metrics_in_parent,
        tracing=tracing_on,
    )
    return RunningServer(
        server=server,
        db=db,
        health=health_servicer,
        port=port,
        memories=memories,
        supervisor=supervisor,
        knowledge=knowledge,
        filler=filler,
        embedded_pg=pg,
        metrics_server=metrics_server,
        tracing_on=tracing_on,
        interceptor=interceptor,
    )


def _rate_limiter(settings: Settings) -> Limiter:
    """The per-key rate limit: this process's own, or the one all workers share."""
    if settings.rate_limit_file is None:
        return RateLimiter(settings.rate_limit, settings.rate_burst)
    return SharedRateLimiter(settings.rate_limit_file, settings.rate_limit, settings.rate_burst)


async def run(settings: Settings, ready: Callable[[], None] | None = None) -> None:
    """Serve until SIGTERM/SIGINT, then drain; ``ready`` is called once serving."""
    running = await start_server(settings)
    if ready is not None:
        ready()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    waiter = asyncio.create_task(running.server.wait_for_termination())
    stopper = asyncio.create_task(stop.wait())
    await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
    _log.info("shutting down", grace_seconds=settings.grace_seconds)
    await running.stop(settings.grace_seconds)
    for task in (waiter, stopper):
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _tenant_embedders(
    db: Database, settings: Settings, default: Embedder
) -> dict[str, tuple[str, Embedder]]:
    """tenant id -> (embedder name, embedder) for ``--tenant-embedder``; the named tenants
    must exist, and an embedder named twice is built once."""
    try:
        choices = parse_tenant_embedders(settings.tenant_embedders)
    except ValueError as exc:
        raise StartupError(f"--tenant-embedder: {exc}") from exc
    if not choices:
        return {}
    built: dict[str, Embedder] = {settings.embedder: default}
    found: dict[str, tuple[str, Embedder]] = {}
    rows = await db.pool.fetch(
        "SELECT tenant_id, name FROM brain_tenant_ids($1::text[])", list(choices)
    )
    ids = {r["name"]: str(r["tenant_id"]) for r in rows}
    for tenant, name in choices.items():
        if tenant not in ids:
            raise StartupError(f"--tenant-embedder: no tenant named {tenant!r}")
        if name not in built:
            if name == "openai" or name not in EMBEDDER_NAMES:
                raise StartupError(
                    f"--tenant-embedder: {tenant}={name}: choose none, local or multilingual "
                    "(an openai endpoint serves the whole server: --embedder openai)"
                )
            built[name] = InstrumentedEmbedder(build_embedder(name))
        found[ids[tenant]] = (name, built[name])
    return found


def retrieval_params(settings: Settings) -> RetrievalParams | None:
    """The shipped retrieval parameters with the server's flags applied (None: as shipped)."""
    flags = (settings.graph_lane_weight, settings.hop_entities, settings.hop_vector_weight)
    if all(flag is None for flag in flags):
        return None
    params = RetrievalParams()
    if settings.graph_lane_weight is not None:
        params = replace(params, graph_weight=settings.graph_lane_weight)
    if settings.hop_entities is not None:
        params = replace(params, hop_entities=settings.hop_entities)
    if settings.hop_vector_weight is not None:
        params = replace(params, hop_vector_weight=settings.hop_vector_weight)
    return params
