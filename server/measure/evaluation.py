"""brain-eval: turn-level retrieval quality on the LoCoMo benchmark, through the real API.

The command line. ``brain-eval locomo`` runs the LoCoMo data set (`locomo`; its docstring
tells the method), ``brain-eval knowledge`` the knowledge base's (`knowledge_eval`),
``brain-eval conflicts`` conflict detection and consolidation (`conflicts`), ``brain-eval
multilingual`` team memories in many languages (`multilingual`) and ``brain-eval updates``
current state first on updated facts (`updates`). This module parses the
flags, checks that they fit together, and turns a failure into one line and an exit code.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import grpc

from brain.authz import CommandParser, add_version_argument
from brain.server.measure import conflicts, entities, knowledge_eval, multilingual, updates
from brain.server.measure.locomo import (
    DataError,
    Progress,
    format_table,
    load_locomo,
    run_locomo,
)
from brain.server.runtime.config import (
    add_embedder_arguments,
    add_graph_extract_arguments,
    add_reranker_arguments,
    embedder_settings,
    graph_extract_settings,
    reranker_settings,
)
from brain.server.runtime.startup import StartupError
from brain.server.telemetry import logs

T = TypeVar("T")


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="brain-eval", description=__doc__.split("\n\n")[0])
    add_version_argument(parser)
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("locomo", help="turn-level recall on a LoCoMo-format file")
    p.add_argument("--data", type=Path, required=True, help="LoCoMo-format JSON file")
    add_embedder_arguments(p)  # the private server's embedder, as brain-server takes it
    server_default = p.get_default("embedder")
    p.set_defaults(embedder=None, server_default_embedder=server_default)  # None: not given
    add_reranker_arguments(p)  # the private server's reranker, if a deployment brings one
    add_graph_extract_arguments(p)  # --graph-lane-weight, as brain-server takes it
    p.add_argument("--json", action="store_true", help="print one JSON object, not a table")
    p.add_argument("--target", help="host:port of a running brain-server to evaluate instead")
    p.add_argument(
        "--api-key",
        default=os.environ.get("BRAIN_API_KEY"),
        help="with --target: a key with memories:read,write,forget [BRAIN_API_KEY]",
    )
    p.add_argument(
        "--limit-conversations", type=_positive, metavar="N", help="only the first N samples"
    )
    p.add_argument("--k", type=_positive, default=20, help="search limit (default 20, max 100)")
    p.add_argument(
        "--concurrency",
        type=_positive,
        metavar="N",
        default=8,
        help="SaveMemory calls in flight while loading (default 8); searches run one at a time",
    )
    p.add_argument(
        "--graph",
        choices=entities.EXTRACTORS,
        default="speakers",
        help="entities each turn asserts: the speaker (who the turn is about, as an "
        "agent would assert it) and the capitalised names in it (default), the names only, "
        "or none",
    )
    p.add_argument(
        "--folds",
        action="store_true",
        help="cross-validate the learned fusion and its floor (refitted per fold) and the "
        "hand-weighted grid, leaving one conversation out at a time (private server only; "
        "asks every question once per grid candidate)",
    )
    p.add_argument(
        "--learned-folds",
        action="store_true",
        help="--folds for the learned fusion only (refits its models; skips asking the "
        "hand-weighted grid, about a third of the time)",
    )
    knowledge_eval.add_parser(commands)
    conflicts.add_parser(commands)
    multilingual.add_parser(commands)
    updates.add_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "multilingual":
        spoken = _private_run(multilingual.run(args))
        print(
            json.dumps(spoken.as_json(), indent=2, ensure_ascii=False)
            if args.json
            else multilingual.format_table(spoken)
        )
        return
    if args.command == "updates":
        results = _private_run(updates.run(args))
        print(
            json.dumps([r.as_json() for r in results], indent=2, ensure_ascii=False)
            if args.json
            else updates.format_table(results)
        )
        return
    if args.command == "knowledge":
        found = _private_run(knowledge_eval.run(args))
        print(json.dumps(found.as_json(), indent=2) if args.json else found.table())
        return
    if args.command == "conflicts":
        _conflicts(args)
        return
    if args.target is not None and not args.api_key:
        _fail("--target needs --api-key (or BRAIN_API_KEY): a key with memories:read,write", 2)
    if args.target is not None and args.embedder is not None:
        _fail("--embedder configures the private server; a --target uses its own", 2)
    if args.target is not None and (args.folds or args.learned_folds):
        _fail("--folds needs the private server; a --target keeps its own parameters", 2)
    args.embedder = args.embedder or args.server_default_embedder
    options = embedder_settings(args) | reranker_settings(args) | graph_extract_settings(args)
    if args.k > 100:
        _fail("--k must be at most 100 (the server's page limit)", 2)
    logs.configure("warning")
    try:
        conversations = load_locomo(args.data)[: args.limit_conversations]
        result = asyncio.run(
            run_locomo(
                conversations,
                embedder=str(options.pop("embedder")),
                embedder_options=options,
                target=args.target,
                api_key=args.api_key,
                k=args.k,
                concurrency=args.concurrency,
                progress=Progress(sys.stderr),
                folds=args.folds or args.learned_folds,
                learned_only=args.learned_folds,
                graph=args.graph,
            )
        )
    except (DataError, StartupError, ValueError) as exc:
        _fail(str(exc), 2)
    except grpc.aio.AioRpcError as exc:
        where = args.target or "the private server"
        hint = ""
        if args.target and exc.code() == grpc.StatusCode.PERMISSION_DENIED:
            hint = " (each conversation goes to a fresh namespace locomo-*; use a key with "
            hint += "memories:read,write,forget that is not confined to a namespace)"
        _fail(f"a call to {where} failed: {exc.code().name}: {exc.details()}{hint}", 1)
    except KeyboardInterrupt:
        _fail("interrupted" + ("" if args.target else "; the private server was removed"), 130)
    print(json.dumps(result.as_json(), indent=2) if args.json else format_table(result))


def _private_run(run: Coroutine[Any, Any, T]) -> T:
    """Run one evaluation against its private server; a bad set or setting exits 2, a
    failed call 1, each with its message."""
    logs.configure("warning")
    try:
        return asyncio.run(run)
    except (OSError, ValueError, KeyError, StartupError) as exc:
        _fail(str(exc), 2)
    except grpc.aio.AioRpcError as exc:
        _fail(f"a call to the private server failed: {exc.code().name}: {exc.details()}", 1)


def _conflicts(args: argparse.Namespace) -> None:
    logs.configure("warning")
    try:
        done = asyncio.run(conflicts.run(args))
    except (OSError, ValueError, StartupError) as exc:
        _fail(str(exc), 2)
    except grpc.aio.AioRpcError as exc:
        _fail(f"a call to the private server failed: {exc.code().name}: {exc.details()}", 1)
    except KeyboardInterrupt:
        _fail("interrupted; the private server was removed", 130)
    if done is None:
        return  # --dump
    figures, heading = done
    print(json.dumps(figures, indent=2) if args.json else conflicts.format_table(figures, heading))


def _fail(message: str, code: int) -> NoReturn:
    print(f"brain-eval: error: {message}", file=sys.stderr)
    sys.exit(code)


if __name__ == "__main__":
    main()
