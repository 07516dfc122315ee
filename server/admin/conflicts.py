"""brain-admin conflicts: list what writes found, and propose consolidations (issue 30).

Run as the owner, like every admin command: it sees every memory of the tenant. A
consolidation it proposes is a candidate by ``admin:<os user>``, so any reviewer of the
tenant (another principal) decides it through ReviewCandidate, as for an agent's proposal.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import asyncpg
from pgvector.asyncpg import register_vector

from brain.authz import Confinement, RequestScope, is_valid_name
from brain.server.admin.registry import (
    Context,
    UsageError,
    acting,
    admin_principal,
    command,
    output,
)
from brain.server.domain.conflicts import consolidation
from brain.server.domain.conflicts.detectors import RESTATED
from brain.server.storage.conflicts import CONFLICT_COLUMNS
from brain.server.storage.visibility import Visibility


def register(subparsers: Any) -> None:
    """Add the ``conflicts`` subcommands to brain-admin."""
    group = subparsers.add_parser(
        "conflicts", help="conflicts between memories, and consolidation of restatements"
    ).add_subparsers(dest="sub", required=True)
    p: argparse.ArgumentParser = command(
        group, "list", cmd_list, "list a tenant's conflicts (default: the open ones)"
    )
    p.add_argument("--tenant", required=True)
    p.add_argument("--namespace")
    p.add_argument("--state", choices=["open", "resolved", "dismissed", "applied"], default="open")
    p = command(
        group,
        "consolidate",
        cmd_consolidate,
        "propose one consolidated memory per cluster of restatements in a namespace",
    )
    p.add_argument("namespace")
    p.add_argument("--tenant", required=True)
    p.add_argument("--dry-run", action="store_true", help="list the clusters, propose nothing")
    p.add_argument("--max-clusters", type=int, default=20)
    p.add_argument(
        "--min-overlap", type=float, default=RESTATED, help="word overlap that clusters (0..1)"
    )
    p.add_argument("--reason", default="consolidation (brain-admin)")


async def _tenant(conn: asyncpg.Connection, name: str) -> Any:
    tenant_id = await conn.fetchval("SELECT tenant_id FROM tenants WHERE name = $1", name)
    if tenant_id is None:
        raise UsageError(f"no tenant named {name!r}; create it with `brain-admin tenants create`")
    return tenant_id


async def cmd_list(ctx: Context) -> None:
    a = ctx.args
    async with ctx.connect() as conn:
        tenant_id = await _tenant(conn, a.tenant)
        rows = await conn.fetch(
            f"""SELECT {CONFLICT_COLUMNS} FROM memory_conflicts c
                WHERE c.tenant_id = $1 AND c.state = $2
                  AND ($3::text IS NULL OR c.namespace = $3)
                ORDER BY c.conflict_id DESC""",
            tenant_id, a.state, a.namespace,
        )  # fmt: skip
    output(
        a,
        [dict(r) for r in rows],
        "\n".join(
            f"{r['conflict_id']}\t{r['namespace']}\t{r['rule']}\t{r['older_id']} -> "
            f"{r['newer_id']}\t{r['detail']}"
            for r in rows
        )
        or f"no {a.state} conflicts",
    )


async def cmd_consolidate(ctx: Context) -> None:
    a = ctx.args
    if not is_valid_name(a.namespace):
        raise UsageError(f"namespace {a.namespace!r} is not a valid name")
    if not 0 < a.max_clusters <= 100:
        raise UsageError("--max-clusters must be between 1 and 100")
    if not 0.0 <= a.min_overlap <= 1.0:
        raise UsageError("--min-overlap must be between 0 and 1")
    principal = admin_principal()
    async with ctx.connect() as conn:
        # The codecs the server's connections use (metadata as a mapping, vectors).
        await conn.set_type_codec(
            "jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog"
        )
        await register_vector(conn)
        tenant_id = await _tenant(conn, a.tenant)
        everything = Visibility(
            tenant_id=str(tenant_id), labels=frozenset(), confinement=Confinement(),
            scope=RequestScope(namespace=a.namespace), app_filter=False,
        )  # fmt: skip
        # The quota and audit triggers read the tenant of the transaction.
        async with acting(conn, {"brain.tenant_id": str(tenant_id)}):
            rows = await consolidation.active_rows(conn, everything, a.namespace)
            found = consolidation.clusters(rows, a.min_overlap)[: a.max_clusters]
            proposed: list[dict[str, Any]] = []
            for cluster in found:
                candidate = None
                if not a.dry_run:
                    row = await consolidation.propose(
                        conn, tenant_id, cluster, principal, "brain-admin", a.reason
                    )
                    candidate = str(row["memory_id"])
                proposed.append(
                    {
                        "candidate": candidate,
                        "chosen": str(cluster.chosen["memory_id"]),
                        "sources": [str(s["memory_id"]) for s in cluster.sources],
                        "min_overlap": round(cluster.min_overlap, 3),
                    }
                )
    output(
        a,
        proposed,
        "\n".join(
            f"{p['candidate'] or '(dry run)'}\t{len(p['sources'])} restatements\t"
            f"text of {p['chosen']}\tsources {' '.join(p['sources'])}"
            for p in proposed
        )
        or "no restatements to consolidate",
    )
