"""Who reads a memory: the labels a write may give it, and where a successor must be.

A key grants only labels it holds and revokes only those; keeping a label a memory (or
what it supersedes) already has is no grant. A successor reaches every reader of what it
supersedes (`brain.server.storage.visibility.reaches_readers`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import asyncpg

from brain.authz import Caller
from brain.server.domain.memories._common import DEFAULT_LABEL
from brain.server.errors import FailedPrecondition, PermissionDenied
from brain.server.storage import memories as sql
from brain.server.storage.visibility import bucket_reaches, reaches_readers


def granted(caller: Caller, requested: list[str]) -> list[str]:
    """The labels a new memory gets: those named, which the key must hold, or its default."""
    held = caller.key.labels
    if not requested:
        return [DEFAULT_LABEL] if DEFAULT_LABEL in held else sorted(held)
    extra = set(requested) - held
    if extra:
        raise PermissionDenied(
            f"memory.labels: this key cannot grant label(s) {sorted(extra)}; "
            f"it holds {sorted(held)}"
        )
    return requested


def relabelled(caller: Caller, current: asyncpg.Record, requested: list[str]) -> list[str]:
    """The labels an update may set. A key grants only labels it holds (keeping one
    the memory already has is no grant) and likewise revokes only those: dropping a
    label it does not hold would take the memory from readers it cannot speak for.
    The messages name no label the key does not hold."""
    held, present = caller.key.labels, set(current["labels"])
    requested = requested or granted(caller, [])
    extra = set(requested) - held - present
    if extra:
        raise PermissionDenied(
            f"patch.labels: this key cannot grant label(s) {sorted(extra)}; it holds {sorted(held)}"
        )
    if not present - held <= set(requested):
        raise PermissionDenied(
            "patch.labels: this key cannot remove labels it does not hold; keep the "
            "memory's other labels, or ask a key that holds them"
        )
    if not set(requested) & held:
        raise PermissionDenied(
            f"patch.labels: keep at least one label this key holds ({sorted(held)}): "
            "a key cannot leave a memory where it could no longer reach it; ask a key "
            "that holds the others"
        )
    return requested


def successor(
    caller: Caller, new: sql.NewMemory, targets: Sequence[asyncpg.Record]
) -> sql.NewMemory:
    """``new`` placed to supersede ``targets``: it must reach every reader of each, or
    they would see their memory retired by one they cannot see (who wrote it, when).

    Labels left unnamed are the targets' own; named ones keep every label of theirs
    (which the key may keep without holding, as a relabel may) and add only labels
    the key holds. The bucket is the request's, and must be at least as wide as each
    target's; a proposal is placed in its targets' bucket before this (`Review.proposal_place`).
    """
    if not targets:
        return new
    kept = set().union(*(t["labels"] for t in targets))
    labels = new.labels or sorted(kept)
    extra = set(labels) - caller.key.labels - kept
    if extra:
        raise PermissionDenied(
            f"memory.labels: this key cannot grant label(s) {sorted(extra)}; "
            f"it holds {sorted(caller.key.labels)}"
        )
    placed = replace(new, labels=labels)
    for target in targets:
        if not bucket_reaches(placed.place(), target):
            raise FailedPrecondition(
                f"supersedes: memory {target['memory_id']} is shared beyond this "
                "request's scope, so its readers would not see what replaces it; save "
                f"the new memory in its bucket (user_id {target['user_id']!r}, "
                f"session_id {target['session_id']!r}), or propose it: a proposal is "
                "placed where what it supersedes is"
            )
        if not reaches_readers(placed.place(), target):
            raise FailedPrecondition(
                f"memory.labels: memory {target['memory_id']} has labels this new "
                "memory lacks, so some of its readers would not see what replaces it; "
                "keep every label of what it supersedes (leave memory.labels empty to "
                "take theirs)"
            )
    return placed
