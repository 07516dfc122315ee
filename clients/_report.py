"""What `brain ingest` reports: the files of a run by outcome and the one summary it prints
(see `brain.clients.ingest`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class Report:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # binary, not UTF-8, empty, too large
    failed: list[str] = field(default_factory=list)  # "path: reason"
    why_skipped: dict[str, str] = field(default_factory=dict)  # path -> reason
    sent_bytes: int = 0  # of the files put (created or updated)
    # --prune held back (it looked like a mistake): how many it would have deleted, how many
    # stored documents the run found, under which walked paths.
    prune_held: tuple[int, int, list[str]] | None = None
    relabelled: list[str] = field(default_factory=list)  # unchanged, given --labels
    labels_kept: int = 0  # stored documents whose labels differ from --labels (no --relabel)
    shared_paths: dict[str, int] = field(default_factory=dict)  # path -> documents there
    kept_for_failures: int = 0  # documents --prune kept because files failed to store
    not_deleted: int = 0  # deletions not tried once the server could not be reached
    not_sent: int = 0  # files not sent once the server could not be reached
    awaiting_vectors: int | None = None  # documents of the run whose chunks await vectors

    def summary(self) -> str:
        relabelled = f", {len(self.relabelled)} relabelled" if self.relabelled else ""
        line = (
            f"{len(self.created)} created, {len(self.updated)} updated, "
            f"{len(self.unchanged)} unchanged{relabelled}, {len(self.deleted)} deleted, "
            f"{len(self.skipped)} skipped, {len(self.failed)} failed"
        )
        skipped = "".join(
            f"\n  skipped: {shown(p)} ({self.why_skipped.get(p, '')})" for p in self.skipped
        )
        if self.labels_kept:
            skipped += (
                f"\n  labels kept: {self.labels_kept} stored document(s) have other labels "
                "than --labels, which ingest gives new documents only; add --relabel to set them"
            )
        for path, n in sorted(self.shared_paths.items()):
            skipped += (
                f"\n  shared path: {shown(path)}: {n} documents of this bucket have it (put by "
                "keys with different labels); ingest updates the oldest, the others keep "
                "their text (delete or relabel them to keep one)"
            )
        if self.awaiting_vectors:
            skipped += (
                f"\n  vectors: {self.awaiting_vectors} document(s) have chunks awaiting their "
                "vectors, which the server makes in the background (searches match their "
                "words meanwhile; `brain-admin embeddings status` shows the backlog)"
            )
        if self.not_sent:
            skipped += (
                f"\n  not sent: {self.not_sent} more file(s), once the server could not be "
                "reached; run again once it is back (what was stored is then unchanged)"
            )
        if self.not_deleted:
            skipped += (
                f"\n  not pruned: {self.not_deleted} more document(s) whose files are gone, "
                "not tried once the server could not be reached; run again once it is back "
                "(with --force-prune again if this run needed it)"
            )
        if self.kept_for_failures:
            skipped += (
                f"\n  not pruned: {self.kept_for_failures} document(s) whose files are gone "
                "were kept, because files with their content failed to store (a rename "
                "refused by a quota would lose the document); run again once they store"
            )
        held = ""
        if self.prune_held is not None:
            doomed, matched, under = self.prune_held
            held = (
                f"\n  nothing was put or deleted: --prune would delete {doomed} of the "
                f"documents under {', '.join(shown(p) for p in under)}, while this run found "
                f"{matched} of the stored ones. Documents are named by their path relative to "
                "the current folder: is this the folder they were ingested from? Pass "
                "--force-prune to put and delete anyway."
            )
        return line + skipped + _failures(self.failed) + held

    def sort(self) -> None:
        """Puts finish in any order; the report lists paths in order."""
        for names in (
            self.created, self.updated, self.unchanged, self.relabelled, self.skipped, self.failed,
        ):  # fmt: skip
            names.sort()


def shown(text: str) -> str:
    """``text`` safe to print on a terminal: control characters (an escape sequence in a
    file name would recolour it) and the bytes of a file name that are not UTF-8 (which
    Python reads as lone surrogates) written as escapes."""
    out = []
    for c in text:
        if c.isprintable():
            out.append(c)
        elif 0xDC80 <= ord(c) <= 0xDCFF:  # os.fsdecode's escape of one byte
            out.append(f"\\x{ord(c) - 0xDC00:02x}")
        else:
            out.append(c.encode("unicode_escape").decode("ascii"))
    return "".join(out)


def _failures(failed: Sequence[str], shown_alike: int = 3) -> str:
    """One line per failed file, but a reason shared by many (a server gone with calls in
    flight) is shown for the first few, then counted."""
    by_reason: dict[str, list[str]] = {}
    for entry in failed:
        by_reason.setdefault(entry.partition(": ")[2], []).append(entry)
    out = ""
    for entries in by_reason.values():
        out += "".join(f"\n  failed: {shown(e)}" for e in entries[:shown_alike])
        if len(entries) > shown_alike:
            out += f"\n  failed: {len(entries) - shown_alike} more file(s) the same way"
    return out
