"""brain-server's entry point: parse the command line, then serve in this process or, with
``--workers N`` above 1, in N worker processes (`workers`) that share the port."""

from __future__ import annotations

import asyncio
import sys

from brain.authz import CommandParser, add_version_argument
from brain.server.runtime import workers
from brain.server.runtime.config import add_server_arguments, settings_from_args
from brain.server.runtime.startup import StartupError
from brain.server.telemetry import logs

DESCRIPTION = (
    "Shared Brain's gRPC server. With no database URL it starts an embedded PostgreSQL in "
    "the data directory; flags override the BRAIN_* environment variables (see the "
    "documentation, Configuration)."
)


def main(argv: list[str] | None = None) -> None:
    parser = CommandParser(prog="brain-server", description=DESCRIPTION)
    add_version_argument(parser)
    add_server_arguments(parser)
    settings = settings_from_args(parser.parse_args(argv))
    logs.configure(settings.log_level, settings.log_format)
    if settings.workers > 1:
        sys.exit(workers.serve(settings))
    from brain.server.runtime.app import run  # not in the parent of several workers

    try:
        asyncio.run(run(settings))
    except StartupError as exc:
        logs.fatal("brain-server", str(exc))
        sys.exit(2)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
