"""One embedder per tenant: the server's default, or the one a tenant was configured with.

``brain-server --tenant-embedder acme=multilingual`` (repeatable; ``BRAIN_TENANT_EMBEDDERS``
holds ``acme=multilingual,globex=local``) gives tenant ``acme`` the multilingual model while
every other tenant keeps ``--embedder``. `RoutedEmbedder` stands where one embedder stood:
its name, model and dimension are those of the calling tenant's embedder (read from the
request's caller), so what a write stores (``embedding_model``) and what a search compares
(only vectors of the same model) follow the tenant. Background work without a caller (the
chunk-vector filler) asks `for_tenant`. Vectors a tenant stored with its previous model are
re-embedded with ``brain-admin embeddings backfill --tenant NAME --embedder NAME --reembed``;
until then the semantic lane skips them (another model's vectors are never compared) and
the lexical lanes still find them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from brain.authz import current_caller
from brain.server.domain.retrieval.embedders import Embedder

__all__ = ["RoutedEmbedder", "model_of", "parse_tenant_embedders", "per_tenant"]


def parse_tenant_embedders(text: str | None) -> dict[str, str]:
    """``acme=multilingual,globex=local`` -> {tenant name: embedder name}; ValueError
    naming the bad item."""
    choices: dict[str, str] = {}
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        tenant, sep, embedder = item.partition("=")
        if not sep or not tenant.strip() or not embedder.strip():
            raise ValueError(f"{item!r} is not TENANT=EMBEDDER")
        choices[tenant.strip()] = embedder.strip()
    return choices


class RoutedEmbedder:
    """The calling tenant's embedder; the default one outside a call or for other tenants."""

    def __init__(self, default: Embedder, by_tenant_id: Mapping[str, Embedder]) -> None:
        self.default = default
        self.by_tenant_id = dict(by_tenant_id)

    def for_tenant(self, tenant_id: Any) -> Embedder:
        return self.by_tenant_id.get(str(tenant_id), self.default)

    def resolve(self) -> Embedder:
        """The embedder of the request being served (its caller's tenant)."""
        caller = current_caller.get()
        return self.default if caller is None else self.for_tenant(caller.tenant_id)

    @property
    def name(self) -> str:
        return self.resolve().name

    @property
    def dimension(self) -> int:
        return self.resolve().dimension

    def __getattr__(self, attribute: str) -> Any:  # model, model_name: see model_id
        if attribute in ("default", "by_tenant_id"):
            raise AttributeError(attribute)
        return getattr(self.resolve(), attribute)

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return await self.resolve().embed(texts)

    async def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        embedder = self.resolve()
        return await getattr(embedder, "embed_queries", embedder.embed)(texts)


def model_of(embedder: Embedder) -> str | None:
    """What vectors of ``embedder`` are stored as (the memories' ``model_id``)."""
    if embedder.dimension == 0:
        return None
    model = getattr(embedder, "model", None) or getattr(embedder, "model_name", None)
    return f"{embedder.name}:{model}" if model else embedder.name


def per_tenant(
    embedder: Embedder, model: str | None, tenants: Sequence[Any]
) -> dict[str, tuple[Embedder, str | None]]:
    """Background work (no caller): each tenant's embedder and model; one for all when the
    server routes none."""
    route = getattr(embedder, "for_tenant", None)
    if route is None:
        return {str(t): (embedder, model) for t in tenants}
    return {str(t): (route(t), model_of(route(t))) for t in tenants}
