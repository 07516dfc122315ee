"""Domain errors, translated to gRPC status codes in one place (servicers/_status.py).

    BrainError
    ├── InvalidArgument      a caller's mistake, names the field  → INVALID_ARGUMENT
    ├── NotFound             no such row, or one outside scope      → NOT_FOUND
    ├── PermissionDenied     the key may not do this                → PERMISSION_DENIED
    ├── FailedPrecondition   e.g. a tombstone holds the value       → FAILED_PRECONDITION
    ├── AlreadyExists        idempotency key reused with a new body → ALREADY_EXISTS
    ├── Conflict             expected_version is stale              → ABORTED
    ├── ResourceExhausted    a quota or limit is spent              → RESOURCE_EXHAUSTED
    ├── DeadlineExceeded     the statement timeout fired            → DEADLINE_EXCEEDED
    ├── Unavailable          the database cannot be reached         → UNAVAILABLE
    └── NotImplementedYet    the RPC is designed but not built      → UNIMPLEMENTED

Database errors become these in the storage layer (``raise ... from exc``).
"""

from __future__ import annotations

from brain.authz._messages import bounded


class BrainError(Exception):
    """Base of every error the service reports to a caller (its message cut to what a
    status may carry, `brain.authz._messages`)."""

    def __init__(self, message: str) -> None:
        message = bounded(message)
        super().__init__(message)
        self.message = message


class InvalidArgument(BrainError):
    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


class NotFound(BrainError):
    pass


MEMORY_NOT_FOUND = "memory not found"


def memory_not_found() -> NotFound:
    """The one NOT_FOUND for a memory id: byte-identical for missing and out-of-scope ids."""
    return NotFound(MEMORY_NOT_FOUND)


SUPERSEDE_TARGET_NOT_FOUND = "supersedes: memory not found"


def supersede_target_not_found() -> NotFound:
    """A supersedes target that is missing or invisible: one byte-identical NOT_FOUND,
    whichever id it was and wherever the check runs (save, propose, approval)."""
    return NotFound(SUPERSEDE_TARGET_NOT_FOUND)


class PermissionDenied(BrainError):
    pass


class FailedPrecondition(BrainError):
    pass


class AlreadyExists(BrainError):
    pass


class Conflict(BrainError):
    pass


class ResourceExhausted(BrainError):
    pass


class StorageFull(ResourceExhausted):
    """The database's disk is full: the server's state, not the caller's request."""


class DeadlineExceeded(BrainError):
    pass


class Unavailable(BrainError):
    pass


class NotImplementedYet(BrainError):
    pass
