"""The audit log: listing a tenant's events, checking its hash chain, signed checkpoints.

Events are written by database triggers in the same transaction as the change
(migration 0003), never by this module. Each tenant has one chain::

    hash(n) = SHA-256(hash(n-1) ‖ canonical(event n)),   hash(0) = 32 zero bytes

``canonical`` here mirrors the SQL function ``brain_audit_canonical``; ``verify_chain``
recomputes every hash outside the database, so an edited, deleted or inserted row
shows up as the first event whose hash or predecessor no longer fits. A chain rewritten
end to end is caught by a checkpoint: the head (tenant, seq, hash) signed with Ed25519
and kept outside the database.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import uuid
from collections.abc import AsyncIterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from brain.authz import Caller, Permission, RequestScope
from brain.server.domain import convert, cursors
from brain.server.domain import validation as check
from brain.server.domain.cursors import Tokens
from brain.server.errors import InvalidArgument
from brain.server.storage import audit as sql
from brain.server.storage.db import Database
from brain.server.storage.visibility import Visibility
from brain.v1 import audit_pb2

GENESIS = bytes(32)
CANONICAL_VERSION = "brain-audit/1"
CHECKPOINT_FORMAT = "brain-audit-checkpoint/1"
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 100


# --- the chain ------------------------------------------------------------------------


def canonical(
    tenant_id: str,
    seq: int,
    at: datetime,
    key_id: str,
    principal: str,
    method: str,
    memory_ids: Sequence[uuid.UUID | str],
    outcome: str,
) -> bytes:
    """The bytes an event's hash covers: ``<len>:<utf-8>;`` per field."""
    fields = [
        CANONICAL_VERSION,
        str(tenant_id),
        str(seq),
        at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        key_id,
        principal,
        method,
        ",".join(str(m) for m in memory_ids),
        outcome,
    ]
    out = bytearray()
    for field in fields:
        data = field.encode()
        out += f"{len(data)}:".encode() + data + b";"
    return bytes(out)


def event_hash(prev_hash: bytes, row: Any) -> bytes:
    """SHA-256 of the previous hash and this event row's canonical form."""
    body = canonical(
        str(row["tenant_id"]),
        row["seq"],
        row["at"],
        row["key_id"],
        row["principal"],
        row["method"],
        row["memory_ids"],
        row["outcome"],
    )
    return hashlib.sha256(prev_hash + body).digest()


@dataclass(frozen=True, slots=True)
class ChainBreak:
    """The first event that does not fit the chain, and why."""

    seq: int
    reason: str


@dataclass(frozen=True, slots=True)
class ChainReport:
    tenant_id: str
    tenant: str
    events: int
    head_seq: int
    head_hash: str
    broken: ChainBreak | None
    checkpoint: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "tenant_id": self.tenant_id,
            "ok": self.broken is None,
            "events": self.events,
            "head_seq": self.head_seq,
            "head_hash": self.head_hash,
            "first_broken_seq": self.broken.seq if self.broken else None,
            "reason": self.broken.reason if self.broken else None,
            "checkpoint": self.checkpoint or None,
        }


async def verify_chain(
    rows: AsyncIterable[Any],
    *,
    head_seq: int | None,
    head_hash: bytes | None,
    checkpoint: Checkpoint | None = None,
) -> tuple[int, bytes, ChainBreak | None]:
    """Walk one tenant's events in seq order; return (last seq, last hash, first break)."""
    expected, prev = 1, GENESIS
    at_checkpoint: bytes | None = None
    async for row in rows:
        seq = row["seq"]
        if seq != expected:
            return (
                expected - 1,
                prev,
                ChainBreak(
                    expected, f"event {expected} is missing (the next stored event is {seq})"
                ),
            )
        if bytes(row["prev_hash"]) != prev:
            what = "the genesis hash" if seq == 1 else f"the hash of event {seq - 1}"
            return seq - 1, prev, ChainBreak(seq, f"its prev_hash does not match {what}")
        if event_hash(prev, row) != bytes(row["hash"]):
            return (
                seq - 1,
                prev,
                ChainBreak(
                    seq, "its stored hash does not match its contents (the row was changed)"
                ),
            )
        prev = bytes(row["hash"])
        if checkpoint is not None and seq == checkpoint.seq:
            at_checkpoint = prev
        expected += 1
    last = expected - 1
    recorded = head_seq or 0
    if recorded > last:
        return (
            last,
            prev,
            ChainBreak(
                last + 1,
                f"events {last + 1}..{recorded} are missing: the chain ends at {last} "
                f"but its head records {recorded}",
            ),
        )
    if recorded < last:
        return (
            last,
            prev,
            ChainBreak(recorded + 1, f"the head records seq {recorded} but events go on to {last}"),
        )
    if last and head_hash is not None and bytes(head_hash) != prev:
        return last, prev, ChainBreak(last, f"the head's hash does not match event {last}")
    if checkpoint is not None:
        if checkpoint.seq > last:
            return (
                last,
                prev,
                ChainBreak(
                    last + 1,
                    f"the signed checkpoint is at seq {checkpoint.seq} but the chain ends at "
                    f"{last}: events were removed",
                ),
            )
        if at_checkpoint is None or at_checkpoint.hex() != checkpoint.hash:
            return (
                last,
                prev,
                ChainBreak(
                    checkpoint.seq,
                    f"event {checkpoint.seq} no longer matches the signed checkpoint: the "
                    f"chain was rewritten at or before seq {checkpoint.seq}",
                ),
            )
    return last, prev, None


async def verify_tenants(
    conn: asyncpg.Connection, tenant: str | None, checkpoint: Checkpoint | None = None
) -> list[ChainReport]:
    """Verify the chain of every tenant, or of the one named (as the owner)."""
    reports = []
    for t in await sql.tenants(conn, tenant):
        cp = checkpoint if checkpoint and checkpoint.tenant_id == str(t["tenant_id"]) else None
        last, last_hash, broken = await verify_chain(
            sql.chain(conn, t["tenant_id"]),
            head_seq=t["head_seq"],
            head_hash=t["head_hash"],
            checkpoint=cp,
        )
        reports.append(
            ChainReport(
                tenant_id=str(t["tenant_id"]),
                tenant=t["name"],
                events=last,
                head_seq=last,
                head_hash=last_hash.hex(),
                broken=broken,
                checkpoint=f"seq {cp.seq} signed {cp.signed_at}" if cp else "",
            )
        )
    return reports


# --- signed checkpoints ---------------------------------------------------------------


class CheckpointError(Exception):
    """A checkpoint or signing key file is unusable, or its signature is not valid."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    tenant_id: str
    tenant: str
    seq: int
    hash: str  # hex
    signed_at: str
    public_key: str  # base64 of the raw 32-byte Ed25519 key
    signature: str = ""  # base64

    def message(self) -> bytes:
        """The exact bytes signed."""
        return (
            f"{CHECKPOINT_FORMAT}\n{self.tenant_id}\n{self.seq}\n{self.hash}\n{self.signed_at}\n"
        ).encode()

    def as_json(self) -> dict[str, Any]:
        return {
            "format": CHECKPOINT_FORMAT,
            "tenant_id": self.tenant_id,
            "tenant": self.tenant,
            "seq": self.seq,
            "hash": self.hash,
            "signed_at": self.signed_at,
            "public_key": self.public_key,
            "signature": self.signature,
        }


def raw_public_key(key: Ed25519PublicKey) -> str:
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode()


def sign_checkpoint(
    key: Ed25519PrivateKey, tenant_id: str, tenant: str, seq: int, head_hash: bytes
) -> Checkpoint:
    unsigned = Checkpoint(
        tenant_id=tenant_id,
        tenant=tenant,
        seq=seq,
        hash=head_hash.hex(),
        signed_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        public_key=raw_public_key(key.public_key()),
    )
    signature = base64.b64encode(key.sign(unsigned.message())).decode()
    return dataclasses.replace(unsigned, signature=signature)


def read_checkpoint(path: Path, pinned: Ed25519PublicKey | None) -> Checkpoint:
    """Load a checkpoint file and check its signature (against ``pinned`` when given)."""
    try:
        data = json.loads(path.read_text())
        if data.get("format") != CHECKPOINT_FORMAT:
            raise CheckpointError(f"{path} is not a {CHECKPOINT_FORMAT} file")
        cp = Checkpoint(
            tenant_id=str(data["tenant_id"]),
            tenant=str(data["tenant"]),
            seq=int(data["seq"]),
            hash=str(data["hash"]),
            signed_at=str(data["signed_at"]),
            public_key=str(data["public_key"]),
            signature=str(data["signature"]),
        )
        embedded = Ed25519PublicKey.from_public_bytes(base64.b64decode(cp.public_key))
        signature = base64.b64decode(cp.signature)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"cannot read checkpoint {path}: {exc}") from exc
    if pinned is not None and raw_public_key(pinned) != cp.public_key:
        raise CheckpointError(f"checkpoint {path} was not signed by the given public key")
    try:
        (pinned or embedded).verify(signature, cp.message())
    except InvalidSignature as exc:
        raise CheckpointError(
            f"checkpoint {path} has an invalid signature: the file was altered"
        ) from exc
    return cp


# --- ListAuditEvents ------------------------------------------------------------------


def event_message(row: Any, chain: bool) -> audit_pb2.AuditEvent:
    """One event; its place in the tenant's chain (seq, prev_hash, hash) only for a key
    that sees the whole chain (``sees_chain``): gaps in it would count hidden events."""
    event = audit_pb2.AuditEvent(
        key_id=row["key_id"],
        principal=row["principal"],
        method=row["method"],
        memory_ids=[str(m) for m in row["memory_ids"]],
        outcome=row["outcome"],
    )
    if chain:
        event.seq = row["seq"]
        event.prev_hash = bytes(row["prev_hash"]).hex()
        event.hash = bytes(row["hash"]).hex()
    at = convert.ts(row["at"])
    if at is not None:
        event.at.CopyFrom(at)
    return event


class AuditLog:
    """Reads the calling key's tenant's audit events."""

    def __init__(self, db: Database, tokens: Tokens, statement_timeout_ms: int = 10_000) -> None:
        self.db = db
        self.tokens = tokens
        self.statement_timeout_ms = statement_timeout_ms

    @staticmethod
    def visibility(caller: Caller) -> Visibility:
        """Audit reads follow confinement and labels: a key sees the events of the memories
        it may see (labels and proposals bind as on every read). A key confined to nothing
        reads across namespaces whatever scope the request names, and also the tenant
        events (keys, policies); a confined key stays within the request's scope."""
        v = Visibility.of(caller)
        if caller.key.confinement.is_confined:
            return v
        return dataclasses.replace(v, scope=RequestScope())

    @staticmethod
    def sees_chain(caller: Caller) -> bool:
        """A tenant-wide auditor: ``audit:chain`` on a key confined to nothing. It lists
        every event of the tenant with its chain; any other key its own view, unchained."""
        return caller.has(Permission.AUDIT_CHAIN.value) and not caller.key.confinement.is_confined

    async def list_events(
        self, caller: Caller, req: audit_pb2.ListAuditEventsRequest, timeout_ms: int | None
    ) -> tuple[list[asyncpg.Record], str]:
        """One page of events, oldest first, and the token for the next page ('' at the end)."""
        size = req.page_size or DEFAULT_PAGE_SIZE
        if not 0 < size <= MAX_PAGE_SIZE:
            raise InvalidArgument("page_size", f"must be between 1 and {MAX_PAGE_SIZE}")
        query = sql.EventQuery(
            after_seq=self.tokens.decode_seq(
                caller, "page_token", req.page_token, kind=cursors.Kind.AUDIT
            ),
            limit=size + 1,
            memory_id=check.memory_id("memory_id", req.memory_id) if req.memory_id else None,
            principal=check.text("principal", req.principal),
            since=check.timestamp(req.since, req.HasField("since")),
        )
        tenant_wide = not caller.key.confinement.is_confined
        async with self.db.caller_tx(
            caller, timeout_ms=timeout_ms, cap_ms=self.statement_timeout_ms, readonly=True
        ) as conn:
            rows = await sql.list_events(
                conn,
                caller.tenant_id,
                query,
                None if self.sees_chain(caller) else self.visibility(caller),
                tenant_wide,
            )
        if len(rows) > size:
            return rows[:size], self.tokens.encode_seq(
                caller, rows[size - 1]["seq"], kind=cursors.Kind.AUDIT
            )
        return rows, ""
