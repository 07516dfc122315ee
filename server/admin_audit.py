"""brain-admin audit: verify and checkpoint the hash chain (filled in by issue #5)."""

from __future__ import annotations

from typing import Any


def register(subparsers: Any, command: Any) -> None:
    """Add the ``audit`` subcommands to brain-admin."""
