"""brain-admin audit: verify the hash chains, sign checkpoints of their heads.

    brain-admin audit verify [--tenant T] [--checkpoint FILE [--public-key FILE]] [--json]
    brain-admin audit keygen --out FILE
    brain-admin audit checkpoint --tenant T --key FILE --out FILE

``verify`` exits 1 when a chain is broken and names the first broken event.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from brain.server.admin.registry import Context, UsageError, command
from brain.server.domain import audit

EXIT_BROKEN = 1


def _public_key(path: Path) -> Ed25519PublicKey:
    try:
        key = serialization.load_pem_public_key(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read public key {path}: {exc}") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise UsageError(f"{path} is not an Ed25519 public key")
    return key


def _private_key(path: Path) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise UsageError(f"cannot read signing key {path}: {exc}") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise UsageError(f"{path} is not an Ed25519 private key (make one with `audit keygen`)")
    return key


def _print_reports(json_out: bool, reports: list[audit.ChainReport]) -> None:
    if json_out:
        print(json.dumps([r.as_json() for r in reports], indent=2))
        return
    for r in reports:
        if r.broken is None:
            extra = f"; checkpoint {r.checkpoint} holds" if r.checkpoint else ""
            print(f"{r.tenant}\tok\t{r.events} events\thead {r.head_hash[:16]}{extra}")
        else:
            print(f"{r.tenant}\tBROKEN at seq {r.broken.seq}: {r.broken.reason}")
    broken = sum(1 for r in reports if r.broken is not None)
    print(f"{len(reports)} chain(s) checked, {broken} broken" if reports else "no tenants")


async def cmd_verify(ctx: Context) -> None:
    a = ctx.args
    checkpoint = None
    if a.checkpoint is not None:
        pinned = _public_key(a.public_key) if a.public_key is not None else None
        try:
            checkpoint = audit.read_checkpoint(a.checkpoint, pinned)
        except audit.CheckpointError as exc:
            print(f"brain-admin: checkpoint rejected: {exc}", file=sys.stderr)
            raise SystemExit(EXIT_BROKEN) from exc
        if pinned is None:
            print(
                "note: checkpoint signature checked against the key inside it; "
                "pass --public-key to pin the signer",
                file=sys.stderr,
            )
    tenant = a.tenant or (checkpoint.tenant if checkpoint else None)
    async with ctx.connect() as conn:
        reports = await audit.verify_tenants(conn, tenant, checkpoint)
    if tenant is not None and not reports:
        raise UsageError(f"no tenant named {tenant!r}")
    if checkpoint is not None and not any(r.tenant_id == checkpoint.tenant_id for r in reports):
        raise UsageError(
            f"the checkpoint is for tenant {checkpoint.tenant!r}, which was not checked"
        )
    _print_reports(a.json, reports)
    if any(r.broken is not None for r in reports):
        raise SystemExit(EXIT_BROKEN)


async def cmd_keygen(ctx: Context) -> None:
    out: Path = ctx.args.out
    pub = out.with_name(out.name + ".pub")
    key = Ed25519PrivateKey.generate()
    private_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public_pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    try:
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError as exc:
        raise UsageError(f"{out} exists; refusing to overwrite a signing key") from exc
    except OSError as exc:
        raise UsageError(f"cannot create {out}: {exc}") from exc
    with os.fdopen(fd, "wb") as f:
        f.write(private_pem)
    pub.write_bytes(public_pem)
    data = {"private_key": str(out), "public_key": str(pub)}
    text = (
        f"signing key {out} (mode 0600) and public key {pub}.\n"
        "Keep the signing key away from the database host; give verifiers the public key."
    )
    print(json.dumps(data, indent=2) if ctx.args.json else text)


async def cmd_checkpoint(ctx: Context) -> None:
    a = ctx.args
    key = _private_key(a.key)
    async with ctx.connect() as conn:
        reports = await audit.verify_tenants(conn, a.tenant)
    if not reports:
        raise UsageError(f"no tenant named {a.tenant!r}")
    report = reports[0]
    if report.broken is not None:
        _print_reports(a.json, reports)
        print("brain-admin: refusing to sign a broken chain", file=sys.stderr)
        raise SystemExit(EXIT_BROKEN)
    if report.head_seq == 0:
        raise UsageError(f"tenant {a.tenant!r} has no audit events to checkpoint yet")
    cp = audit.sign_checkpoint(
        key, report.tenant_id, report.tenant, report.head_seq, bytes.fromhex(report.head_hash)
    )
    out: Path = a.out
    tmp = out.with_name(out.name + ".tmp")
    try:
        tmp.write_text(json.dumps(cp.as_json(), indent=2) + "\n")
        tmp.replace(out)
    except OSError as exc:
        raise UsageError(f"cannot write {out}: {exc}") from exc
    text = f"signed checkpoint of {cp.tenant} at seq {cp.seq} (hash {cp.hash[:16]}…) -> {out}"
    print(json.dumps(cp.as_json(), indent=2) if a.json else text)


def register(subparsers: Any) -> None:
    """Add the ``audit`` subcommands to brain-admin."""
    group = subparsers.add_parser("audit", help="verify and checkpoint the audit log")
    sub = group.add_subparsers(dest="sub", required=True)
    p = command(
        sub, "verify", cmd_verify, "walk each tenant's hash chain; name the first broken event"
    )
    p.add_argument("--tenant", help="only this tenant (default: all)")
    p.add_argument("--checkpoint", type=Path, help="also check this signed checkpoint file")
    p.add_argument("--public-key", type=Path, help="the checkpoint must be signed by this key")
    p = command(sub, "keygen", cmd_keygen, "create an Ed25519 key pair for signing checkpoints")
    p.add_argument("--out", type=Path, required=True, help="private key file; public key: FILE.pub")
    p = command(
        sub, "checkpoint", cmd_checkpoint, "sign a tenant's chain head to a file kept elsewhere"
    )
    p.add_argument("--tenant", required=True)
    p.add_argument("--key", type=Path, required=True, help="signing key from `audit keygen`")
    p.add_argument("--out", type=Path, required=True)
