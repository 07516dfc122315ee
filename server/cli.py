"""Pieces shared by the brain-admin subcommands (kept apart so any module can import them)."""

from __future__ import annotations

import re
from datetime import timedelta

_DURATION = re.compile(r"^(\d+)([smhdw])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


class UsageError(Exception):
    """A brain-admin command was asked for something it cannot do; the message says why."""


def parse_duration(text: str) -> timedelta:
    """``90d``, ``12h``, ``30m``, ``45s``, ``2w``."""
    match = _DURATION.fullmatch(text.strip())
    if not match:
        raise UsageError(f"duration {text!r} must look like 90d, 12h, 30m, 45s or 2w")
    return timedelta(seconds=int(match.group(1)) * _UNITS[match.group(2)])
