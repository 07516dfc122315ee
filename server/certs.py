"""brain-admin certs: local certificates for trying TLS and mTLS (filled in by issue #3)."""

from __future__ import annotations

from typing import Any


def register(subparsers: Any, command: Any) -> None:
    """Add the ``certs`` subcommands to brain-admin."""
