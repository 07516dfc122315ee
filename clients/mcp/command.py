"""The `brain-mcp` console script: the proxy's command line plus ``--version``.

``--version``, ``--help`` (which lists it) and a usage mistake (one line, as every console
script has them) are answered here, then ``proxy.main`` parses the same arguments again
and runs. This seam exists because the proxy module was being changed in parallel when
the flag came; building ``proxy._parser`` as a ``CommandParser`` with the flag and pointing
the script back at ``proxy:main`` is the next tidy-up.
"""

from __future__ import annotations

from collections.abc import Sequence

from brain.authz import CommandParser, add_version_argument
from brain.clients.mcp import proxy


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the `brain-mcp` console script."""
    own = proxy._parser()
    parser = CommandParser(
        prog=own.prog, description=own.description, parents=[own], add_help=False
    )
    add_version_argument(parser)
    parser.parse_args(argv)  # exits for --help, --version and a bad flag (one error line)
    proxy.main(argv)
