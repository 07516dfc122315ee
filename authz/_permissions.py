"""Permissions and the classification of every RPC."""

from __future__ import annotations

import enum


class Permission(enum.StrEnum):
    READ = "memories:read"
    WRITE = "memories:write"
    PROPOSE = "memories:propose"
    REVIEW = "memories:review"
    FORGET = "memories:forget"
    AUDIT = "audit:read"
    # The tenant's whole audit log with its chain (seq, prev_hash, hash): every event,
    # whatever scope and labels its memories have (events hold no content). Only for a key
    # confined to nothing; without it a key sees its events without the chain, which would
    # count the events it may not see.
    AUDIT_CHAIN = "audit:chain"
    # Knowledge documents are a separate decision from memories: a key that may save
    # memories does not thereby publish or erase documents.
    KNOWLEDGE_READ = "knowledge:read"
    KNOWLEDGE_WRITE = "knowledge:write"
    KNOWLEDGE_DELETE = "knowledge:delete"


ALL_PERMISSIONS: frozenset[str] = frozenset(p.value for p in Permission)
# A key minted without permissions can only read.
DEFAULT_PERMISSIONS: frozenset[str] = frozenset({Permission.READ.value})


class MethodClass(enum.StrEnum):
    READ = "read"
    WRITE = "write"
    PROPOSE = "propose"
    REVIEW = "review"
    FORGET = "forget"
    AUDIT = "audit"
    KNOWLEDGE_READ = "knowledge_read"
    KNOWLEDGE_WRITE = "knowledge_write"
    KNOWLEDGE_DELETE = "knowledge_delete"
    ROWLESS = "rowless"


# The permission a method class needs; None: any authenticated key.
REQUIRED_PERMISSION: dict[MethodClass, Permission | None] = {
    MethodClass.READ: Permission.READ,
    MethodClass.WRITE: Permission.WRITE,
    MethodClass.PROPOSE: Permission.PROPOSE,
    MethodClass.REVIEW: Permission.REVIEW,
    MethodClass.FORGET: Permission.FORGET,
    MethodClass.AUDIT: Permission.AUDIT,
    MethodClass.KNOWLEDGE_READ: Permission.KNOWLEDGE_READ,
    MethodClass.KNOWLEDGE_WRITE: Permission.KNOWLEDGE_WRITE,
    MethodClass.KNOWLEDGE_DELETE: Permission.KNOWLEDGE_DELETE,
    MethodClass.ROWLESS: None,
}

# Every RPC of brain.v1, by full method name. The interceptor refuses anything else;
# tests check this table against the service descriptors so no method is missed.
METHOD_CLASSES: dict[str, MethodClass] = {
    "/brain.v1.MemoryService/SaveMemory": MethodClass.WRITE,
    "/brain.v1.MemoryService/GetMemory": MethodClass.READ,
    "/brain.v1.MemoryService/UpdateMemory": MethodClass.WRITE,
    "/brain.v1.MemoryService/ForgetMemory": MethodClass.FORGET,
    "/brain.v1.MemoryService/SearchMemories": MethodClass.READ,
    "/brain.v1.MemoryService/ListMemories": MethodClass.READ,
    "/brain.v1.MemoryService/GetMemoryHistory": MethodClass.READ,
    "/brain.v1.MemoryService/ExportMemories": MethodClass.READ,
    "/brain.v1.MemoryService/WatchMemories": MethodClass.READ,
    "/brain.v1.MemoryService/BuildContext": MethodClass.READ,
    "/brain.v1.ReviewService/ProposeMemory": MethodClass.PROPOSE,
    "/brain.v1.ReviewService/ListCandidates": MethodClass.READ,
    "/brain.v1.ReviewService/ReviewCandidate": MethodClass.REVIEW,
    "/brain.v1.ReviewService/WithdrawCandidate": MethodClass.PROPOSE,
    # Conflicts are read out of the memories they join (both must be visible), so listing
    # them is reading memories; deciding one, or proposing consolidations, is review.
    "/brain.v1.ReviewService/ListConflicts": MethodClass.READ,
    "/brain.v1.ReviewService/ResolveConflict": MethodClass.REVIEW,
    "/brain.v1.ReviewService/ConsolidateMemories": MethodClass.REVIEW,
    "/brain.v1.AuditService/ListAuditEvents": MethodClass.AUDIT,
    "/brain.v1.IdentityService/WhoAmI": MethodClass.ROWLESS,
    # The graph is read out of memories (visible exactly when an asserting memory is), so
    # reading it is reading memories: no separate permission.
    "/brain.v1.GraphService/LookupEntity": MethodClass.READ,
    "/brain.v1.GraphService/ListNeighbours": MethodClass.READ,
    "/brain.v1.KnowledgeService/PutDocument": MethodClass.KNOWLEDGE_WRITE,
    "/brain.v1.KnowledgeService/PutDocuments": MethodClass.KNOWLEDGE_WRITE,
    "/brain.v1.KnowledgeService/GetDocument": MethodClass.KNOWLEDGE_READ,
    "/brain.v1.KnowledgeService/ListDocuments": MethodClass.KNOWLEDGE_READ,
    "/brain.v1.KnowledgeService/DeleteDocument": MethodClass.KNOWLEDGE_DELETE,
    "/brain.v1.KnowledgeService/SearchKnowledge": MethodClass.KNOWLEDGE_READ,
}


def parse_permissions(text: str | list[str] | None) -> frozenset[str]:
    """Parse ``memories:read,memories:write``; an empty value means read-only."""
    items = text.split(",") if isinstance(text, str) else (text or [])
    perms = frozenset(p.strip() for p in items if p.strip())
    unknown = perms - ALL_PERMISSIONS
    if unknown:
        raise ValueError(
            f"unknown permission(s) {sorted(unknown)}; choose from {sorted(ALL_PERMISSIONS)}"
        )
    return perms or DEFAULT_PERMISSIONS


def allowed_methods(permissions: frozenset[str]) -> list[str]:
    """Full method names a key holding these permissions may call."""
    out = []
    for method, cls in METHOD_CLASSES.items():
        needed = REQUIRED_PERMISSION[cls]
        if needed is None or needed.value in permissions:
            out.append(method)
    return sorted(out)
