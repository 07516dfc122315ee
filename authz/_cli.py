"""What every console script shares: the installed version and one-line usage errors.

It lives here because ``brain.authz`` is the one package both ``brain.server`` and
``brain.clients`` may import.
"""

from __future__ import annotations

import argparse
from importlib import metadata
from typing import NoReturn

DISTRIBUTION = "shared-brain"


def package_version() -> str:
    """The version of the installed ``shared-brain`` distribution, from its metadata
    (``unknown`` when the code runs from a folder that was never installed)."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"


def add_version_argument(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` a ``--version`` flag that prints ``<prog> <version>`` and exits 0."""
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {package_version()}",
        help="print the installed version and exit",
    )  # fmt: skip


class CommandParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage mistakes are one line naming the mistake and where
    help is, not the whole usage (brain-server's runs to 27 lines). Sub-commands made with
    ``add_subparsers().add_parser`` are of this class too."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")
