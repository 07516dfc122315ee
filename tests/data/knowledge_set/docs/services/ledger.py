"""Double-entry ledger: every money movement is a posting of balanced entries.

A posting debits some accounts and credits others by the same total, in one currency.
Postings are immutable; a mistake is corrected by a reversing posting, never by an
update. Balances are derived by summing entries, and cached per account with the id of
the last posting included.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal


class UnbalancedPosting(ValueError):
    """The debits and credits of a posting do not sum to the same amount."""


class CurrencyMismatch(ValueError):
    """A posting mixes currencies; convert first with an explicit FX posting."""


@dataclass(frozen=True)
class Entry:
    account: str
    # Positive amounts are debits, negative amounts credits, in minor units.
    amount: int


@dataclass(frozen=True)
class Posting:
    id: uuid.UUID
    currency: str
    entries: tuple[Entry, ...]
    description: str
    posted_at: datetime
    reverses: uuid.UUID | None = None


def post(
    entries: Sequence[Entry], currency: str, description: str, *, now: datetime | None = None
) -> Posting:
    """Validate and build a posting.

    A posting needs at least two entries, no zero amounts, and a zero sum: the ledger
    refuses anything else rather than guessing which side is wrong.
    """
    if len(entries) < 2:
        raise UnbalancedPosting("a posting needs at least two entries")
    if any(e.amount == 0 for e in entries):
        raise UnbalancedPosting("zero-amount entries are not allowed")
    if sum(e.amount for e in entries) != 0:
        raise UnbalancedPosting(f"entries sum to {sum(e.amount for e in entries)}, not 0")
    return Posting(
        id=uuid.uuid4(),
        currency=currency,
        entries=tuple(entries),
        description=description,
        posted_at=now or datetime.now(UTC),
    )


def reverse(original: Posting, reason: str) -> Posting:
    """The posting that cancels ``original``: every entry with its sign flipped."""
    flipped = [Entry(e.account, -e.amount) for e in original.entries]
    posting = post(flipped, original.currency, f"reversal: {reason}")
    return Posting(
        id=posting.id,
        currency=posting.currency,
        entries=posting.entries,
        description=posting.description,
        posted_at=posting.posted_at,
        reverses=original.id,
    )


@dataclass
class Balances:
    """Running balances per (account, currency), built from postings in order."""

    totals: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    last_posting: uuid.UUID | None = None

    def apply(self, postings: Iterable[Posting]) -> None:
        for p in postings:
            for e in p.entries:
                self.totals[(e.account, p.currency)] += e.amount
            self.last_posting = p.id

    def of(self, account: str, currency: str) -> int:
        return self.totals.get((account, currency), 0)


def fx_posting(
    source: str, target: str, amount: int, source_currency: str, target_currency: str,
    rate: Decimal, clearing: str = "fx-clearing",
) -> tuple[Posting, Posting]:
    """Move money between currencies through a clearing account: two postings, each
    balanced in its own currency. The rate is applied with banker's rounding."""
    if source_currency == target_currency:
        raise CurrencyMismatch("an FX posting needs two different currencies")
    converted = int((Decimal(amount) * rate).quantize(Decimal(1), rounding="ROUND_HALF_EVEN"))
    out = post([Entry(source, -amount), Entry(clearing, amount)], source_currency, "fx out")
    into = post(
        [Entry(clearing, -converted), Entry(target, converted)], target_currency, "fx in"
    )
    return out, into
