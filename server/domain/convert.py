"""Database rows to brain.v1 messages."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp

from brain.v1 import common_pb2

STATUS_TO_PROTO = {
    "active": common_pb2.MEMORY_STATUS_ACTIVE,
    "candidate": common_pb2.MEMORY_STATUS_CANDIDATE,
    "superseded": common_pb2.MEMORY_STATUS_SUPERSEDED,
    "retracted": common_pb2.MEMORY_STATUS_RETRACTED,
    "rejected": common_pb2.MEMORY_STATUS_REJECTED,
    "withdrawn": common_pb2.MEMORY_STATUS_WITHDRAWN,
}
PROTO_TO_STATUS = {v: k for k, v in STATUS_TO_PROTO.items()}


def ts(value: datetime | None) -> Timestamp | None:
    if value is None:
        return None
    out = Timestamp()
    out.FromDatetime(value)
    return out


def memory(row: Any) -> common_pb2.Memory:
    """One memory version as the API shows it."""
    m = common_pb2.Memory(
        id=str(row["memory_id"]),
        version=row["version"],
        scope=common_pb2.Scope(
            user_id=row["user_id"], namespace=row["namespace"], session_id=row["session_id"]
        ),
        content=row["content"],
        kind=row["kind"],
        tags=row["tags"],
        metadata=row["metadata"],
        labels=row["labels"],
        status=STATUS_TO_PROTO[row["status"]],
        confidence=row["confidence"],
        importance=row["importance"],
        created_by=row["created_by"],
        changed_by=row["changed_by"],
        change=row["change"],
        reviewed_by=row["reviewed_by"] or "",
        review_reason=row["review_reason"] or "",
        proposal_reason=row["proposal_reason"] or "",
        supersedes=[str(x) for x in row["supersedes"]],
        superseded_by=[str(x) for x in row["superseded_by"]],
        has_embedding=row["has_embedding"],
    )
    for name in (
        "valid_from",
        "valid_to",
        "recorded_at",
        "retired_at",
        "expires_at",
        "reviewed_at",
        "candidate_expires_at",
    ):
        stamp = ts(row[name])
        if stamp is not None:
            getattr(m, name).CopyFrom(stamp)
    return m


def receipt(row: Any) -> common_pb2.Memory:
    """What a write shows a key that may not read: where the memory is and what state it is
    in, never its content, tags, metadata, reasons or links (a response never carries
    what the caller's permissions could not read)."""
    m = common_pb2.Memory(
        id=str(row["memory_id"]),
        version=row["version"],
        scope=common_pb2.Scope(
            user_id=row["user_id"], namespace=row["namespace"], session_id=row["session_id"]
        ),
        labels=row["labels"],
        status=STATUS_TO_PROTO[row["status"]],
        changed_by=row["changed_by"],
        change=row["change"],
    )
    recorded = ts(row["recorded_at"])
    if recorded is not None:
        m.recorded_at.CopyFrom(recorded)
    return m


def shown(row: Any, may_read: bool) -> common_pb2.Memory:
    """The full memory for a key with memories:read, else its receipt."""
    return memory(row) if may_read else receipt(row)


def chunk_source(row: Any) -> common_pb2.ChunkSource:
    """Where a knowledge chunk comes from, for an agent to cite."""
    return common_pb2.ChunkSource(
        chunk_id=str(row["chunk_id"]),
        document_id=str(row["document_id"]),
        version=row["version"],
        collection=row["collection"],
        path=row["path"],
        heading_path=row["heading_path"],
        line_start=row["line_start"],
        line_end=row["line_end"],
    )
