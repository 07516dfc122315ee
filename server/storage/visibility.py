"""The one visibility predicate: which memory rows a caller may see.

Every read path and every write by id embeds ``visibility_predicate`` in the same
SQL statement that reads or changes the row, so there is no check-then-act gap, and
a row outside scope is indistinguishable from a row that does not exist.

A memory is one object for visibility: every version of it is visible exactly when its
head (its highest version, which is the current one) is. So a relabel or a forget
applies to the whole history, on every path (history, ``as_of`` reads, export with
history, Watch replays). The head is visible when it

- belongs to the key's tenant,
- shares at least one ACL label with the key,
- lies inside both the key's confinement and the request's scope (within a namespace a
  user sees the team-shared rows, ``user_id = ''``, and their own; within a user a
  session sees the user's session-less rows and its own session's), and
- is admitted, or the caller may see proposals: a memory whose head is a candidate (or a
  rejected or withdrawn proposal) is visible only to its proposer and to keys with
  ``memories:review``.

Current rows are checked directly (the fast path every recall takes); an older version
looks its head up by primary key. Migration 0005 gives row-level security the same rule.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from brain.authz import Caller, Confinement, Permission, RequestScope

# Head statuses of a memory that was never admitted: proposer and reviewers only.
PROPOSAL_STATUSES = ("candidate", "rejected", "withdrawn")


class Params:
    """Collects query parameters and hands out ``$n`` placeholders."""

    def __init__(self, *initial: Any) -> None:
        self.values: list[Any] = list(initial)

    def add(self, value: Any) -> str:
        self.values.append(value)
        return f"${len(self.values)}"


def bucket_reaches(newer: Any, older: Any) -> bool:
    """Whether every caller whose scope covers ``older`` also covers ``newer`` (rows or
    `NewMemory.place`): the same
    namespace, and a bucket at least as wide (team-shared or the same user; user-wide or
    the same session)."""
    return (
        newer["namespace"] == older["namespace"]
        and newer["user_id"] in ("", older["user_id"])
        and newer["session_id"] in ("", older["session_id"])
    )


def reaches_readers(newer: Any, older: Any) -> bool:
    """Whether every caller who can see ``older`` can also see ``newer``: a bucket at least
    as wide and every label of ``older`` (a reader shares a label with what it reads). A
    successor that did not would tell the readers of what it replaced that a memory they
    cannot see exists, who wrote it and when (the rule of
    `brain.server.storage.graph.SAME_READERS`, on two rows)."""
    return bucket_reaches(newer, older) and set(newer["labels"]) >= set(older["labels"])


@dataclass(frozen=True, slots=True)
class Visibility:
    tenant_id: str
    labels: frozenset[str]
    confinement: Confinement
    scope: RequestScope
    # Who asks: proposals are visible to their proposer and to reviewers.
    principal: str = ""
    may_review: bool = False
    # Off only in tests that prove row-level security holds on its own.
    app_filter: bool = True
    # With app_filter off, still name the caller's tenant in every statement: on Citus a
    # statement reaches one shard only when each table in it is pinned to one tenant by a
    # value its planner reads (row-level security's is not one), so there the rls-only
    # tests prove every rule but the tenant wall by row-level security alone.
    tenant_pin: bool = False

    @classmethod
    def of(cls, caller: Caller, *, app_filter: bool = True, tenant_pin: bool = False) -> Visibility:
        return cls(
            tenant_id=caller.tenant_id,
            labels=caller.key.labels,
            confinement=caller.key.confinement,
            scope=caller.scope,
            principal=caller.principal,
            may_review=caller.has(Permission.REVIEW.value),
            app_filter=app_filter,
            tenant_pin=tenant_pin,
        )


def visibility_predicate(v: Visibility, p: Params, alias: str = "m") -> str:
    """SQL boolean expression over ``alias`` restricting rows to what ``v`` may see."""
    if not v.app_filter:
        return _tenant_only(v, p, alias)
    a, head = alias, f"{alias}_head"
    access = _access_rule(v, p)
    # Scope never changes between versions (a trigger holds it, migration 0005), so it is
    # tested on the row itself, where the planner can use it for indexes; labels and status
    # are the head's. A current row is its own head: recall never pays for the lookup.
    # The head is looked up by the caller's tenant, not by the row's (the same tenant: the
    # scope rule says so): with every table of a statement pinned to one tenant, Citus runs
    # it on one shard, where a correlated tenant would make it refuse the statement.
    tenant = p.add(v.tenant_id)
    return (
        f"({_scope_rule(v, p, a)} AND ("
        f"({a}.retired_at IS NULL AND {access(a)})"
        f" OR ({a}.retired_at IS NOT NULL AND EXISTS ("
        f"SELECT 1 FROM (SELECT h.labels, h.status, h.created_by FROM memories h"
        f" WHERE h.tenant_id = {tenant}::uuid AND h.memory_id = {a}.memory_id"
        f" ORDER BY h.version DESC LIMIT 1) {head} WHERE {access(head)}))))"
    )


def object_visibility(v: Visibility, p: Params, alias: str) -> str:
    """The same rule over a row that carries its object's scope and labels itself and has
    no proposal state: a knowledge document version or chunk (migration 0020 keeps labels
    equal on every row of a document, so each row is its own head)."""
    if not v.app_filter:
        return _tenant_only(v, p, alias)
    labels = p.add(sorted(v.labels))
    return f"({_scope_rule(v, p, alias)} AND {alias}.labels && {labels}::text[])"


def cell_predicate(v: Visibility, p: Params, alias: str = "c") -> str:
    """SQL boolean over a ``lexical_cells`` row: whether ``v`` sees the cell's rows.

    A cell (tenant, namespace, user, session, label set) holds only current active rows,
    which every caller sees all or nothing of: the object rule, with no proposal to ask
    about.
    """
    return object_visibility(v, p, alias)


def audit_cell_predicate(v: Visibility, p: Params, alias: str = "c") -> str:
    """SQL boolean over an ``audit_cells`` row (migration 0055) of kind 'object': whether
    ``v`` sees the objects filed there — the object rule, and a cell of proposals never
    admitted only for its proposer and for reviewers, as ``visibility_predicate`` reads a
    head."""
    if not v.app_filter:
        return _tenant_only(v, p, alias)
    rule = object_visibility(v, p, alias)
    if v.may_review:
        return rule
    return f"({rule} AND {alias}.proposer IN ('', {p.add(v.principal)}))"


def _scope_rule(v: Visibility, p: Params, a: str) -> str:
    """The key's tenant and confinement, and the request's scope."""
    c, s = v.confinement, v.scope
    clauses = [f"{a}.tenant_id = {p.add(v.tenant_id)}::uuid"]
    if c.user_id is not None:
        clauses.append(f"{a}.user_id IN ('', {p.add(c.user_id)})")
    if c.namespaces:
        clauses.append(f"{a}.namespace = ANY({p.add(sorted(c.namespaces))}::text[])")
    if c.session_id is not None:
        clauses.append(f"{a}.session_id IN ('', {p.add(c.session_id)})")
    if s.namespace:
        clauses.append(f"{a}.namespace = {p.add(s.namespace)}")
    if s.user_id:
        clauses.append(f"{a}.user_id IN ('', {p.add(s.user_id)})")
    if s.session_id:
        clauses.append(f"{a}.session_id IN ('', {p.add(s.session_id)})")
    return " AND ".join(clauses)


def _access_rule(v: Visibility, p: Params) -> Callable[[str], str]:
    """Labels, and proposals for their proposer and reviewers only, for any row alias (the
    parameters are bound once)."""
    labels = p.add(sorted(v.labels))
    if v.may_review:
        return lambda a: f"{a}.labels && {labels}::text[]"
    statuses, principal = p.add(list(PROPOSAL_STATUSES)), p.add(v.principal)
    return lambda a: (
        f"{a}.labels && {labels}::text[]"
        f" AND ({a}.status <> ALL({statuses}::text[]) OR {a}.created_by = {principal})"
    )


def visible_links(v: Visibility, p: Params, column: str, alias: str = "m") -> str:
    """``alias.column`` (ids of linked memories) cut to the memories ``v`` may see now.

    A ``supersedes`` / ``superseded_by`` link is a side record of the memory it names:
    it is shown exactly when that memory's current version passes the visibility
    predicate, so a reader never learns an id it could not read.
    """
    a = alias
    return (
        f"ARRAY(SELECT u.id FROM unnest({a}.{column}) WITH ORDINALITY AS u (id, n) "
        f"WHERE EXISTS (SELECT 1 FROM memories l WHERE l.tenant_id = {_pinned(v, p, a)} "
        f"AND l.memory_id = u.id AND l.retired_at IS NULL "
        f"AND {visibility_predicate(v, p, 'l')}) ORDER BY u.n)"
    )


def write_predicate(v: Visibility, p: Params, alias: str = "m") -> str:
    """SQL boolean over ``alias``: whether ``v`` may change the row directly.

    Always used together with ``visibility_predicate``, never instead of it. Write power
    follows write scope: a key confined to a user changes only that user's rows — the
    team-shared ones (``user_id = ''``) only by proposing — and a key confined to a
    session changes only that session's rows. Unlike the read rule this is not switched
    off with ``app_filter``: it is authorisation, not isolation.
    """
    a = alias
    clauses = ["TRUE"]
    c = v.confinement
    if c.user_id is not None:
        clauses.append(f"{a}.user_id = {p.add(c.user_id)}")
    if c.session_id is not None:
        clauses.append(f"{a}.session_id = {p.add(c.session_id)}")
    return "(" + " AND ".join(clauses) + ")"


def asserting_memory_visible(v: Visibility, p: Params, alias: str) -> str:
    """SQL boolean over a graph row ``alias`` (a mention or a relation: ``tenant_id``,
    ``memory_id``): the memory that asserted it is visible to ``v`` now.

    A mention or relation is a side record of its memory, like a link: shown exactly when
    the memory's current version passes ``visibility_predicate`` (and has not expired), so
    nothing about an entity known only from invisible memories reaches a caller."""
    a = alias
    return (
        f"EXISTS (SELECT 1 FROM memories am WHERE am.tenant_id = {_pinned(v, p, a)} "
        f"AND am.memory_id = {a}.memory_id AND am.retired_at IS NULL "
        f"AND (am.expires_at IS NULL OR am.expires_at > now()) "
        f"AND {visibility_predicate(v, p, 'am')})"
    )


def _pinned(v: Visibility, p: Params, alias: str) -> str:
    """The tenant a correlated subquery over a tenant table reads: the caller's, as a
    parameter (the row's own tenant, which the statement's scope rule makes the same).
    Citus runs a statement on one shard only when every table in it is pinned to one
    tenant by a value its planner reads (deploy/SCALING.md); with the application's
    predicate off (rls-only, on plain PostgreSQL), the row's tenant, and row-level security
    walls it."""
    if not v.app_filter and not v.tenant_pin:
        return f"{alias}.tenant_id"
    return f"{p.add(v.tenant_id)}::uuid"


def _tenant_only(v: Visibility, p: Params, alias: str) -> str:
    """The application's predicate when it is off: nothing, or only the tenant pin."""
    return f"{alias}.tenant_id = {p.add(v.tenant_id)}::uuid" if v.tenant_pin else "TRUE"
