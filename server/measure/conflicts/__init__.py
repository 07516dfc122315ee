"""`brain-eval conflicts`: conflict detection, consolidation and erasure, through the real API.

A labelled set (`generate`: value updates, corrections, graph slots and restatements that
should be found; additions to multi-valued attributes, look-alikes and past relations that
should not; the same pairs split across users, sessions, labels, namespaces and tenants;
restatement groups to consolidate) is written into two fresh tenants of a private server
(`runner`), and what the server answers is scored (`score`): detection precision and recall
per rule, the false-supersede rate, proposals across a wall (must be 0), consolidation
precision and the completeness of erasure after a source is forgotten (`checks`).

Where to look: `vocabulary`, `dev_bank`, `heldout_bank` are what the set is written from;
`model` its shape and the wall rule; `generate` the set; `runner` and `checks` talk to the
server and fill a `trace.Trace`; `score` and `report` read only the set and the trace.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import grpc

from brain.server.measure.conflicts import checks
from brain.server.measure.conflicts.generate import SEED, SPLITS, combined, generate
from brain.server.measure.conflicts.model import LabelledSet, dump, load
from brain.server.measure.conflicts.report import format_table
from brain.server.measure.conflicts.runner import Runner, provision
from brain.server.measure.conflicts.score import score
from brain.server.measure.conflicts.trace import Trace

__all__ = [
    "SEED",
    "SPLITS",
    "LabelledSet",
    "add_parser",
    "dump",
    "evaluate",
    "format_table",
    "generate",
    "labelled_set",
    "load",
    "run",
    "score",
]


def _quiet(label: str, done: int, total: int) -> None:
    """No progress output."""


async def evaluate(
    address: str, owner_dsn: str, pepper: bytes, labelled: LabelledSet, *,
    concurrency: int = 4, progress: Any = _quiet,
) -> Trace:  # fmt: skip
    """Provision two fresh tenants on the server at ``address`` (through its owner
    database), write the set, run the checks; what the server answered."""
    tenants = await provision(owner_dsn, pepper)
    async with grpc.aio.insecure_channel(address) as channel:
        runner = Runner(channel, tenants)
        await runner.write_all(labelled, concurrency, progress)
        steps = [
            runner.list_all(),
            runner.check_leaks(),
            checks.marks(runner, labelled),
            checks.consolidate(runner, labelled),
            checks.reopen(runner, labelled),
        ]
        for done, step in enumerate(steps, 1):
            await step
            progress("conflicts: reading back and checking", done, len(steps))
        return runner.trace


def labelled_set(args: argparse.Namespace) -> LabelledSet:
    """The set the flags name: --data, or the generated --split (all: both)."""
    if args.data is not None:
        chosen = load(args.data)
    elif args.split == "all":
        chosen = combined(list(SPLITS), args.seed)
    else:
        chosen = generate(args.split, args.seed)
    return chosen.limited(args.limit, args.sets)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


def add_parser(commands: Any) -> None:
    p = commands.add_parser(
        "conflicts",
        help="conflict detection, consolidation and erasure on a generated labelled set",
    )
    p.add_argument(
        "--split", choices=[*SPLITS, "all"], default="dev",
        help="which generated set: dev, heldout (other templates and words), or all",
    )  # fmt: skip
    p.add_argument("--seed", type=int, default=SEED, help=f"generator seed (default {SEED})")
    p.add_argument("--data", type=Path, help="run a set in the --dump format instead")
    p.add_argument("--dump", type=Path, metavar="FILE",
                   help="write the chosen set as JSON to FILE and exit (no server)")  # fmt: skip
    p.add_argument("--lexical", action="store_true", help="the private server has no embedder")
    p.add_argument("--limit", type=_positive, metavar="N",
                   help="only the first N cases of each kind and placement")  # fmt: skip
    p.add_argument("--sets", type=int, metavar="N",
                   help="only the first N consolidation sets (0: none)")  # fmt: skip
    p.add_argument("--concurrency", type=_positive, default=4, metavar="N",
                   help="cases written at once (default 4)")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print one JSON object, not a table")


async def run(args: argparse.Namespace) -> tuple[dict[str, Any], str] | None:
    """The figures and the table's heading; None after --dump."""
    from brain.server.measure.locomo import Progress
    from brain.server.measure.private import private_brain

    labelled = labelled_set(args)
    if args.dump is not None:
        dump(labelled, args.dump)
        return None
    embedder = "none" if args.lexical else "local"
    async with private_brain(embedder) as brain:
        trace = await evaluate(
            brain.address, brain.owner_dsn, brain.pepper, labelled,
            concurrency=args.concurrency, progress=Progress(sys.stderr).update,
        )  # fmt: skip
    figures = score(labelled, trace)
    figures["set"] = {"split": labelled.split, "seed": labelled.seed, "embedder": embedder}
    heading = (
        f"brain-eval conflicts: {labelled.split} split, seed {labelled.seed}, "
        f"{len(labelled.cases)} cases ({figures['cases']['written']} written) and "
        f"{len(labelled.consolidation)} consolidation sets, embedder {embedder}"
    )
    return figures, heading
