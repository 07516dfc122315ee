"""`brain-eval updates`: current state first, on a set of updated facts, through the API.

The set (``data/updates.json``, written for this project) holds per split pairs of
memories (older, newer, a question about now) where the newer states the same fact with a
changed value ("the team meeting is at 2pm on Friday", later "... moved to 3pm"), look-alike
pairs that are not updates ("Alice likes coffee", "Bob likes tea"), and unrelated notes.
All of a split goes into one namespace of a private server: each pair's older memory valid
from day 2n, its newer from day 2n + 1 (saved in that order, so it is also recorded later).
Each question is one SearchMemories call (limit 10, default floor), asked

- about now, with the current-state rule (shipped) and without it (``current_first``
  off): ``newer first`` = the newer memory ranks above the older one (both returned),
  ``newer at 1`` = it is the first hit;
- ``as_of`` the moment between the two saves: ``as_of kept`` = the older is returned and
  the newer is not (it was not recorded yet);
- ``valid_at`` a moment between the two valid times: ``valid_at kept`` = the older is
  returned and the newer is not (it was not valid yet).

For the look-alike pairs, ``moved`` counts pairs whose two memories the rule put in
another order (it must leave them alone).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from brain.v1 import common_pb2, memory_pb2, memory_pb2_grpc

DATA = Path(__file__).resolve().parent / "data" / "updates.json"
SPLITS = ("dev", "held-out")
LIMIT = 10


@dataclass(frozen=True)
class Pair:
    older: str
    newer: str
    question: str


@dataclass(frozen=True)
class UpdateSet:
    updates: tuple[Pair, ...]
    different: tuple[Pair, ...]
    distractors: tuple[str, ...]


def load(split: str, path: Path = DATA) -> UpdateSet:
    data = json.loads(path.read_text())
    part = data["splits"][split]
    return UpdateSet(
        tuple(Pair(*p) for p in part["updates"]),
        tuple(Pair(*p) for p in part["different"]),
        tuple(data["distractors"]),
    )


@dataclass
class UpdatesResult:
    split: str
    pairs: int = 0
    newer_first: int = 0
    newer_at_1: int = 0
    newer_first_without_rule: int = 0
    newer_at_1_without_rule: int = 0
    as_of_kept: int = 0
    valid_at_kept: int = 0
    different: int = 0
    moved: int = 0
    misses: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        n, d = max(self.pairs, 1), max(self.different, 1)
        return {
            "split": self.split,
            "pairs": self.pairs,
            "newer_first": round(self.newer_first / n, 3),
            "newer_at_1": round(self.newer_at_1 / n, 3),
            "newer_first_without_rule": round(self.newer_first_without_rule / n, 3),
            "newer_at_1_without_rule": round(self.newer_at_1_without_rule / n, 3),
            "as_of_kept": round(self.as_of_kept / n, 3),
            "valid_at_kept": round(self.valid_at_kept / n, 3),
            "look_alike_pairs": self.different,
            "look_alike_moved": round(self.moved / d, 3),
            "misses": self.misses,
        }


def _ts(value: datetime) -> Timestamp:
    out = Timestamp()
    out.FromDatetime(value)
    return out


def _before(ids: list[str], first: str, second: str) -> bool:
    """``first`` is returned and ranks above ``second`` (or ``second`` is absent)."""
    return first in ids and (second not in ids or ids.index(first) < ids.index(second))


class _Client:
    def __init__(self, channel: grpc.aio.Channel, api_key: str, namespace: str) -> None:
        self.stub = memory_pb2_grpc.MemoryServiceStub(channel)
        self.md = (("authorization", f"Bearer {api_key}"),)
        self.scope = common_pb2.Scope(namespace=namespace)

    async def save(self, content: str, valid_from: datetime) -> memory_pb2.SaveMemoryResponse:
        draft = common_pb2.MemoryDraft(content=content, valid_from=_ts(valid_from))
        return await self.stub.SaveMemory(
            memory_pb2.SaveMemoryRequest(scope=self.scope, memory=draft),
            metadata=self.md,
            timeout=60,
        )

    async def search(self, query: str, time: common_pb2.TimeTravel | None = None) -> list[str]:
        found = await self.stub.SearchMemories(
            memory_pb2.SearchMemoriesRequest(scope=self.scope, query=query, limit=LIMIT, time=time),
            metadata=self.md,
            timeout=60,
        )
        return [h.memory.id for h in found.hits]


async def evaluate(
    address: str, api_key: str, split: str, data: UpdateSet, toggle: Any
) -> UpdatesResult:
    """Save the split, ask every question (``toggle(on)`` switches the rule on or off)."""
    result = UpdatesResult(split, pairs=len(data.updates), different=len(data.different))
    start = datetime.now(UTC) - timedelta(days=2 * len(data.updates) + 30)
    async with grpc.aio.insecure_channel(address) as channel:
        api = _Client(channel, api_key, f"updates-{split}")
        for note in data.distractors:
            await api.save(note, start)
        saved = []
        for n, pair in enumerate(data.updates + data.different):
            first = await api.save(pair.older, start + timedelta(days=2 * n))
            second = await api.save(pair.newer, start + timedelta(days=2 * n + 1))
            between = start + timedelta(days=2 * n, hours=12)
            saved.append((pair, first.memory, second.memory, between))
        updates, different = saved[: len(data.updates)], saved[len(data.updates) :]
        asked: dict[bool, list[list[str]]] = {}
        for on in (False, True):
            toggle(on)
            asked[on] = [await api.search(pair.question) for pair, *_ in saved]
        for (pair, old, new, between), with_rule, without in zip(
            updates, asked[True], asked[False], strict=False
        ):
            result.newer_first += _before(with_rule, new.id, old.id) and old.id in with_rule
            result.newer_at_1 += with_rule[:1] == [new.id]
            result.newer_first_without_rule += _before(without, new.id, old.id) and (
                old.id in without
            )
            result.newer_at_1_without_rule += without[:1] == [new.id]
            if with_rule[:1] != [new.id]:
                result.misses.append(f"now: {pair.question} -> {_where(with_rule, old, new)}")
            # The moment between the two saves, and between the two valid times.
            past = await api.search(pair.question, common_pb2.TimeTravel(as_of=old.recorded_at))
            then = await api.search(pair.question, common_pb2.TimeTravel(valid_at=_ts(between)))
            result.as_of_kept += old.id in past and new.id not in past
            result.valid_at_kept += old.id in then and new.id not in then
            if not (old.id in past and new.id not in past):
                result.misses.append(f"as_of: {pair.question} -> {_where(past, old, new)}")
            if not (old.id in then and new.id not in then):
                result.misses.append(f"valid_at: {pair.question} -> {_where(then, old, new)}")
        for (pair, old, new, _), with_rule, without in zip(
            different, asked[True][len(updates) :], asked[False][len(updates) :], strict=True
        ):
            # The rule must not reorder the two look-alikes (other hits may move).
            if _before(with_rule, new.id, old.id) != _before(without, new.id, old.id):
                result.moved += 1
                result.misses.append(f"look-alike reordered: {pair.question}")
    return result


def _where(ids: list[str], old: common_pb2.Memory, new: common_pb2.Memory) -> str:
    def rank(memory_id: str) -> str:
        return str(ids.index(memory_id) + 1) if memory_id in ids else "-"

    return f"newer at {rank(new.id)}, older at {rank(old.id)}"


def format_table(results: list[UpdatesResult]) -> str:
    columns = ("pairs", "newer_first", "newer_at_1", "newer_first_without_rule",
               "as_of_kept", "valid_at_kept", "look_alike_moved")  # fmt: skip
    lines = ["updates: current state first (questions about now), and other times kept",
             f"{'':10}" + "".join(f"{c:>{len(c) + 2}}" for c in columns)]  # fmt: skip
    for r in results:
        row = r.as_json()
        lines.append(f"{r.split:10}" + "".join(f"{row[c]:>{len(c) + 2}}" for c in columns))
        lines += [f"  [{r.split}] {m}" for m in r.misses]
    return "\n".join(lines)


def add_parser(commands: Any) -> None:
    p = commands.add_parser(
        "updates", help="current state first on a set of updated facts; as_of/valid_at kept"
    )
    p.add_argument("--split", choices=[*SPLITS, "both"], default="both")
    p.add_argument(
        "--embedder", choices=["local", "multilingual", "none"], default="local",
        help="the private server's embedder",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="print one JSON object, not a table")


async def run(args: argparse.Namespace) -> list[UpdatesResult]:
    from brain.server.measure.private import private_brain

    splits = SPLITS if args.split == "both" else (args.split,)
    results = []
    async with private_brain(args.embedder) as brain:
        shipped = brain.memories.params

        def toggle(on: bool) -> None:
            brain.use(replace(shipped, current_first=on))

        bucket = await brain.bucket("updates")
        for split in splits:
            results.append(
                await evaluate(brain.address, bucket.api_key, split, load(split), toggle)
            )
        brain.use(shipped)
    return results
