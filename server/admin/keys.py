"""brain-admin's core commands: migrations, tenants and quotas, API keys, namespaces, tombstones."""

from __future__ import annotations

import argparse
import sys
import unicodedata
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from brain.authz import Confinement, is_valid_name, parse_permissions
from brain.server.admin.registry import (
    MAX_DURATION,
    Context,
    UsageError,
    acting,
    admin_principal,
    command,
    count,
    output,
    parse_duration,
    positive_duration,
)
from brain.server.domain import quotas
from brain.server.domain.validation import MAX_CANDIDATE_TTL, MAX_TEXT_CHARS
from brain.server.runtime.config import _env
from brain.server.storage import admin as store
from brain.server.storage.migrate import migrate
from brain.server.telemetry import logs


async def cmd_migrate(ctx: Context) -> None:
    dsn = await ctx.owner_dsn()
    try:
        applied = await migrate(dsn)
    except OSError as exc:  # the database cannot be reached: one line, as every command says
        raise UsageError(f"cannot connect to {logs.redact_dsn(dsn)}: {exc}") from exc
    except asyncpg.PostgresError as exc:  # refused login, missing database, a failed step
        raise UsageError(f"cannot migrate {logs.redact_dsn(dsn)}: {exc}") from exc
    names = [f"{m.version:04d}_{m.name}" for m in applied]
    output(ctx.args, {"applied": names}, "\n".join(f"applied {n}" for n in names) or "up to date")


async def cmd_tenants_create(ctx: Context) -> None:
    async with ctx.connect() as conn, acting(conn):
        tenant_id = await store.create_tenant(conn, ctx.args.name)
    output(
        ctx.args,
        {"tenant_id": tenant_id, "name": ctx.args.name},
        f"created tenant {ctx.args.name} ({tenant_id})",
    )


async def cmd_tenants_list(ctx: Context) -> None:
    async with ctx.connect() as conn:
        rows = await store.list_tenants(conn)
    output(
        ctx.args,
        [
            {
                "tenant_id": r["tenant_id"],
                "name": r["name"],
                "created_at": r["created_at"],
                "quotas": {name: r[column] for name, column in store.QUOTA_COLUMNS.items()},
                "usage": {name: r[name] for name in store.QUOTA_COLUMNS},
            }
            for r in rows
        ],
        "\n".join(
            f"{r['name']}\t{r['tenant_id']}\t{r['created_at']:%Y-%m-%d}\t"
            f"memories {r['memories']}/{_limit_text(r['max_memories'])}\t"
            f"documents {r['documents']}/{_limit_text(r['max_documents'])}\t"
            f"document bytes {r['document_bytes']}/{_limit_text(r['max_document_bytes'])}"
            for r in rows
        ),
    )


def _limit_text(limit: int | None) -> str:
    return "unlimited" if limit is None else str(limit)


_UNCHANGED: Any = object()  # a quota flag not given: that limit stays as it is


def _quota(text: str) -> int | None:
    """A quota flag's value: a count, or ``none`` for no limit."""
    if text.strip().lower() in ("none", "unlimited"):
        return None
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count or 'none'") from None
    if not 0 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"{text!r}: a quota is 0 or more, or 'none'")
    return value


def _note_fine_grain(flag: str, limit: int | None) -> None:
    """Say on stderr when a limit is too small to hide anything: a key refused by it counts
    the usage it cannot see rounded up to 1/32 of the limit, which under 33 is one."""
    if limit is not None and 0 < limit <= quotas.GRAIN_PARTS:
        print(
            f"brain-admin: note: {flag} {limit} is {quotas.GRAIN_PARTS} or less, so a key "
            "refused by it can count, one by one, what it cannot see (others' rows or "
            "candidates); where that must stay hidden, set more or give them a tenant or "
            "namespace of their own",
            file=sys.stderr,
        )


async def cmd_tenants_set_quota(ctx: Context) -> None:
    args = ctx.args
    asked = {
        name: getattr(args, name)
        for name in store.QUOTA_COLUMNS
        if getattr(args, name) is not _UNCHANGED
    }
    if not asked:
        raise UsageError("name at least one of --memories, --documents, --document-bytes")
    async with ctx.connect() as conn, acting(conn):
        tenant_id, limits = await store.set_quotas(conn, args.tenant, asked)
    for name, value in asked.items():
        _note_fine_grain(f"--{name.replace('_', '-')}", value)
    output(
        args,
        {"tenant_id": tenant_id, "name": args.tenant, "quotas": limits},
        f"tenant {args.tenant}: "
        + ", ".join(f"{n.replace('_', ' ')} quota {_limit_text(v)}" for n, v in limits.items()),
    )


def _key_json(minted: store.MintedKey) -> dict[str, Any]:
    c = minted.confinement
    return {
        "key": minted.key,
        "key_id": minted.key_id,
        "tenant": minted.tenant_name,
        "tenant_id": minted.tenant_id,
        "principal": minted.principal,
        "permissions": minted.permissions,
        "confinement": {
            "user_id": c.user_id,
            "namespaces": sorted(c.namespaces),
            "session_id": c.session_id,
        },
        "labels": minted.labels,
        "expires_at": minted.expires_at.isoformat() if minted.expires_at else None,
    }


def _print_minted(args: argparse.Namespace, minted: store.MintedKey) -> None:
    output(
        args,
        _key_json(minted),
        f"{minted.key}\n\nkey id {minted.key_id} for {minted.principal} in tenant "
        f"{minted.tenant_name}; permissions {','.join(minted.permissions)}.\n"
        "This is the only time the key is shown: store it in a secret manager now.",
    )


def _confinement(args: argparse.Namespace) -> Confinement:
    for value, flag in [(args.user, "--user"), (args.session, "--session")]:
        if value is not None and not is_valid_name(value):
            raise UsageError(f"{flag} {value!r} is not a valid name")
    for ns in args.namespace or []:
        if not is_valid_name(ns):
            raise UsageError(f"--namespace {ns!r} is not a valid name")
    return Confinement(
        user_id=args.user, namespaces=frozenset(args.namespace or []), session_id=args.session
    )


def _labels(text: str) -> frozenset[str]:
    labels = frozenset(x.strip() for x in text.split(",") if x.strip())
    if not labels:
        raise UsageError("--labels needs at least one label")
    bad = [x for x in labels if not is_valid_name(x)]
    if bad:
        raise UsageError(f"--labels: {bad} are not valid labels")
    return labels


def _principal(text: str) -> str:
    """--principal: who a key acts as, as the server's principal filters can name it (at
    most ``MAX_TEXT_CHARS`` characters) and as a log line can show it (no control
    characters: a newline or an escape sequence would forge or hide audit output)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    if len(text) > MAX_TEXT_CHARS:
        raise argparse.ArgumentTypeError(
            f"is {len(text)} characters; the limit is {MAX_TEXT_CHARS}"
        )
    bad = sorted({c for c in text if unicodedata.category(c) in ("Cc", "Zl", "Zp")})
    if bad:
        raise argparse.ArgumentTypeError(
            f"must not contain control characters ({', '.join(map(ascii, bad))})"
        )
    return text


def longest_candidate_ttl() -> timedelta:
    """The longest review window brain-server accepts (review_within, and so a namespace's
    candidate TTL, which stands in for it): its --max-candidate-ttl-days, read from the
    same BRAIN_MAX_CANDIDATE_TTL_DAYS, else the same default."""
    days = _env("MAX_CANDIDATE_TTL_DAYS")
    if days is None:
        return MAX_CANDIDATE_TTL
    try:
        return min(timedelta(days=int(days)), MAX_DURATION)
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(
            f"BRAIN_MAX_CANDIDATE_TTL_DAYS={days!r} is not a number of days"
        ) from None


def _candidate_ttl(text: str) -> timedelta:
    """--candidate-ttl: a review window proposals there may wait in, more than zero (at
    zero they are invisible at once) and no longer than the server accepts."""
    ttl, most = positive_duration(text), longest_candidate_ttl()
    if ttl > most:
        raise argparse.ArgumentTypeError(
            f"{text!r} is longer than the {most.days} days brain-server accepts for a review "
            "window (its --max-candidate-ttl-days, BRAIN_MAX_CANDIDATE_TTL_DAYS)"
        )
    return ttl


async def cmd_namespaces_set(ctx: Context) -> None:
    """Review policy for one namespace of one tenant."""
    a = ctx.args
    if not is_valid_name(a.namespace):
        raise UsageError(f"namespace {a.namespace!r} is not a valid name")
    async with ctx.connect() as conn, acting(conn):
        tenant_id = await store.tenant_id_by_name(conn, a.tenant)
        # The clock is read first: Citus takes only immutable calls in DO UPDATE SET.
        now = await conn.fetchval("SELECT now()")
        row = await conn.fetchrow(
            """INSERT INTO namespace_policies AS p
                   (tenant_id, namespace, review_required, candidate_ttl, max_pending,
                    conflicts)
               VALUES ($1::uuid, $2, COALESCE($3, false), COALESCE($4, interval '7 days'),
                       COALESCE($5, 1000), COALESCE($6, 'propose'))
               ON CONFLICT (tenant_id, namespace) DO UPDATE SET
                   review_required = COALESCE($3, p.review_required),
                   candidate_ttl = COALESCE($4, p.candidate_ttl),
                   max_pending = COALESCE($5, p.max_pending),
                   conflicts = COALESCE($6, p.conflicts),
                   updated_at = $7
               RETURNING namespace, review_required, candidate_ttl, max_pending, conflicts""",
            tenant_id,
            a.namespace,
            a.review_required,
            a.candidate_ttl,
            a.max_pending,
            a.conflicts.replace("-", "_") if a.conflicts else None,
            now,
        )
    assert row is not None
    _note_fine_grain("--max-pending", a.max_pending)
    output(
        a,
        dict(row),
        f"{row['namespace']}: review_required={row['review_required']} "
        f"candidate_ttl={row['candidate_ttl']} max_pending={row['max_pending']} "
        f"conflicts={row['conflicts']}",
    )


async def cmd_namespaces_list(ctx: Context) -> None:
    async with ctx.connect() as conn:
        if ctx.args.tenant is not None:
            await store.tenant_id_by_name(conn, ctx.args.tenant)  # names one that is not there
        rows = await conn.fetch(
            """SELECT t.name AS tenant, p.namespace, p.review_required, p.candidate_ttl,
                      p.max_pending, p.conflicts
               FROM namespace_policies p JOIN tenants t USING (tenant_id)
               WHERE $1::text IS NULL OR t.name = $1 ORDER BY t.name, p.namespace""",
            ctx.args.tenant,
        )
    output(
        ctx.args,
        [dict(r) for r in rows],
        "\n".join(
            f"{r['tenant']}\t{r['namespace']}\treview_required={r['review_required']}\t"
            f"candidate_ttl={r['candidate_ttl']}\tmax_pending={r['max_pending']}\t"
            f"conflicts={r['conflicts']}"
            for r in rows
        )
        or "no namespace policies (every namespace: no review required)",
    )


async def cmd_tombstones_list(ctx: Context) -> None:
    """A tenant's tombstones: memories' (forget, reject), then documents' (delete)."""
    async with ctx.connect() as conn:
        tenant_id = await store.tenant_id_by_name(conn, ctx.args.tenant)
        rows = await conn.fetch(
            """SELECT tombstone_id, 'memory' AS kind, namespace, user_id, session_id,
                      memory_id, cause, created_at, created_by, readmitted_at, readmitted_by
               FROM tombstones WHERE tenant_id = $1::uuid
                 AND ($2::text IS NULL OR namespace = $2)
               ORDER BY created_at""",
            tenant_id,
            ctx.args.namespace,
        )
        documents = await conn.fetch(
            """SELECT tombstone_id, 'document' AS kind, namespace, user_id, session_id,
                      collection, document_id, 'delete' AS cause, created_at, created_by,
                      readmitted_at, readmitted_by
               FROM document_tombstones WHERE tenant_id = $1::uuid
                 AND ($2::text IS NULL OR namespace = $2)
               ORDER BY created_at""",
            tenant_id,
            ctx.args.namespace,
        )
    output(
        ctx.args,
        [dict(r) for r in [*rows, *documents]],
        "\n".join(
            f"{r['tombstone_id']}\t{r['namespace']}\tuser={r['user_id'] or '*'}\t"
            + (
                f"{r['cause']} of {r['memory_id']}"
                if r["kind"] == "memory"
                else f"delete of document {r['document_id']} in collection {r['collection']}"
            )
            + f" by {r['created_by']}\t"
            f"{'readmitted by ' + r['readmitted_by'] if r['readmitted_at'] else 'live'}"
            for r in [*rows, *documents]
        )
        or "no tombstones",
    )


async def cmd_tombstones_readmit(ctx: Context) -> None:
    """Lift a tombstone (of a memory's value or a deleted document's content) so that it
    may be stored again in its bucket (and collection)."""
    async with ctx.connect() as conn, acting(conn):
        tenant_id = await store.tenant_id_by_name(conn, ctx.args.tenant)
        for table in ("tombstones", "document_tombstones"):
            status = await conn.execute(
                f"""UPDATE {table} SET readmitted_at = now(), readmitted_by = $3
                    WHERE tenant_id = $1::uuid AND tombstone_id::text = $2
                      AND readmitted_at IS NULL""",
                tenant_id,
                ctx.args.tombstone_id,
                admin_principal(),
            )
            if status != "UPDATE 0":
                break
    if status == "UPDATE 0":
        raise UsageError(f"no live tombstone {ctx.args.tombstone_id} in tenant {ctx.args.tenant}")
    output(ctx.args, {"readmitted": ctx.args.tombstone_id}, f"readmitted {ctx.args.tombstone_id}")


async def cmd_keys_create(ctx: Context) -> None:
    a = ctx.args
    if a.permissions is not None and not a.permissions.replace(",", "").strip():
        raise UsageError(
            "--permissions names no permission; leave the flag out for memories:read only"
        )
    try:
        permissions = parse_permissions(a.permissions or "")
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    confinement = _confinement(a)
    if "audit:chain" in permissions and (
        confinement.is_confined or "audit:read" not in permissions
    ):
        raise UsageError(
            "audit:chain (the whole audit log with its chain) needs audit:read and a key "
            "confined to nothing: drop --user, --namespace and --session"
        )
    expires_at = datetime.now(UTC) + a.expires_in if a.expires_in else None
    pepper = ctx.pepper
    async with ctx.connect() as conn, acting(conn):
        minted = await store.mint_key(
            conn,
            pepper,
            tenant=a.tenant,
            principal=a.principal,
            permissions=permissions,
            confinement=confinement,
            labels=_labels(a.labels),
            expires_at=expires_at,
            description=a.description,
        )
    _print_minted(a, minted)


async def cmd_keys_list(ctx: Context) -> None:
    async with ctx.connect() as conn:
        if ctx.args.tenant is not None:
            await store.tenant_id_by_name(conn, ctx.args.tenant)  # names one that is not there
        rows = await store.list_keys(conn, ctx.args.tenant)
    now = datetime.now(UTC)

    def state(r: Any) -> str:
        if r["revoked_at"] and r["revoked_at"] <= now:
            return "revoked"
        if r["expires_at"] and r["expires_at"] <= now:
            return "expired"
        return "active"

    lines = [
        f"{r['key_id']}\t{r['tenant']}\t{r['principal']}\t{state(r)}\t"
        f"{','.join(r['permissions'])}\tuser={r['confine_user_id'] or '*'} "
        f"ns={','.join(r['confine_namespaces']) or '*'} session={r['confine_session_id'] or '*'}\t"
        f"labels={','.join(r['labels'])}\tlast_used={r['last_used_at'] or 'never'}"
        for r in rows
    ]
    output(ctx.args, [{**dict(r), "state": state(r)} for r in rows], "\n".join(lines) or "no keys")


async def cmd_keys_revoke(ctx: Context) -> None:
    async with ctx.connect() as conn, acting(conn):
        await store.revoke_key(conn, ctx.args.key_id)
    output(ctx.args, {"revoked": ctx.args.key_id}, f"revoked {ctx.args.key_id}")


async def cmd_keys_rotate(ctx: Context) -> None:
    """A new key with the same grants; the old one stops working after the grace period."""
    grace: timedelta = ctx.args.grace
    pepper = ctx.pepper
    async with ctx.connect() as conn, acting(conn):
        old = await store.key_row(conn, ctx.args.key_id)
        minted = await store.mint_key(
            conn,
            pepper,
            tenant=old["tenant"],
            principal=old["principal"],
            permissions=frozenset(old["permissions"]),
            confinement=Confinement(
                user_id=old["confine_user_id"],
                namespaces=frozenset(old["confine_namespaces"]),
                session_id=old["confine_session_id"],
            ),
            labels=frozenset(old["labels"]),
            expires_at=old["expires_at"],
            description=old["description"],
            rotated_from=old["key_id"],
        )
        await store.revoke_key(conn, old["key_id"], datetime.now(UTC) + grace)
    _print_minted(ctx.args, minted)


def register(sub: Any) -> None:
    """Add the core commands to brain-admin."""
    command(sub, "migrate", cmd_migrate, "apply pending schema migrations")

    tenants = sub.add_parser("tenants", help="manage tenants").add_subparsers(
        dest="sub", required=True
    )
    p: argparse.ArgumentParser = command(tenants, "create", cmd_tenants_create, "create a tenant")
    p.add_argument("name")
    command(tenants, "list", cmd_tenants_list, "list tenants with their quotas and usage")
    p = command(tenants, "set-quota", cmd_tenants_set_quota, "limit what a tenant may store")
    p.add_argument("tenant")
    p.add_argument(
        "--memories",
        type=_quota,
        default=_UNCHANGED,
        help="most stored (active or candidate) memories; 'none' lifts the limit",
    )
    p.add_argument(
        "--documents",
        type=_quota,
        default=_UNCHANGED,
        help="most current knowledge documents; 'none' lifts the limit",
    )
    p.add_argument(
        "--document-bytes",
        type=_quota,
        default=_UNCHANGED,
        help="most bytes of content in current knowledge documents; 'none' lifts the limit",
    )

    keys = sub.add_parser("keys", help="manage API keys").add_subparsers(dest="sub", required=True)
    p = command(keys, "create", cmd_keys_create, "mint an API key (printed once)")
    p.add_argument("--tenant", required=True)
    p.add_argument(
        "--principal",
        required=True,
        type=_principal,
        help=f"who acts: alice, agent:coder, ... (at most {MAX_TEXT_CHARS} characters)",
    )
    p.add_argument(
        "--permissions", default=None, help="comma-separated; default memories:read only"
    )
    p.add_argument("--user", help="confine to this user_id")
    p.add_argument("--namespace", action="append", help="confine to this namespace (repeatable)")
    p.add_argument("--session", help="confine to this session_id")
    p.add_argument("--labels", default="team", help="ACL labels the key holds (default team)")
    p.add_argument("--expires-in", type=positive_duration, help="e.g. 90d, 12h")
    p.add_argument("--description", default="")
    p = command(keys, "list", cmd_keys_list, "list keys (never secrets)")
    p.add_argument("--tenant")
    p = command(keys, "revoke", cmd_keys_revoke, "revoke a key now")
    p.add_argument("key_id")
    p = command(
        keys, "rotate", cmd_keys_rotate, "mint a replacement key; the old one expires after --grace"
    )
    p.add_argument("key_id")
    p.add_argument(
        "--grace", type=parse_duration, default="24h", help="how long the old key keeps working"
    )
    namespaces = sub.add_parser("namespaces", help="per-namespace review policy").add_subparsers(
        dest="sub", required=True
    )
    p = command(namespaces, "set", cmd_namespaces_set, "set a namespace's review policy")
    p.add_argument("namespace")
    p.add_argument("--tenant", required=True)
    p.add_argument(
        "--review-required",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="saves from keys without memories:review become candidates",
    )
    p.add_argument(
        "--candidate-ttl",
        type=_candidate_ttl,
        help="default review window, e.g. 7d (at most the server's --max-candidate-ttl-days)",
    )
    p.add_argument("--max-pending", type=count(1), help="cap on candidates awaiting review")
    p.add_argument(
        "--conflicts",
        choices=["off", "propose", "supersede-own"],
        help="what writes do with conflicts they find: propose them for review (default), "
        "turn detection off, or let a writer's own supersede happen at once (same user, "
        "session and labels)",
    )
    p = command(namespaces, "list", cmd_namespaces_list, "list namespace policies")
    p.add_argument("--tenant")

    tombstones = sub.add_parser(
        "tombstones", help="values kept from coming back after forget, reject or delete"
    ).add_subparsers(dest="sub", required=True)
    p = command(tombstones, "list", cmd_tombstones_list, "list a tenant's tombstones")
    p.add_argument("--tenant", required=True)
    p.add_argument("--namespace")
    p = command(
        tombstones, "readmit", cmd_tombstones_readmit, "let a tombstoned value be stored again"
    )
    p.add_argument("tombstone_id")
    p.add_argument("--tenant", required=True)
