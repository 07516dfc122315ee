"""CPU time by process, read from ``/proc``: what a benchmark's calls cost the machine.

brain-bench reports, per call, the CPU its calls took in the server's processes, in
PostgreSQL's and in the load driver's own. Where the service and its load share the
machine's cores, calls/s can never pass cores x 1000 / (CPU ms per call), however the work
is spread: the figures say which part of a call to make cheaper, and how far a goal is
from what the work costs. Linux only; elsewhere nothing is reported.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True)
class Watched:
    """A process to account for and, with ``tree``, every process under it (a server's
    workers, PostgreSQL's backends), as they are when the measurement starts and ends."""

    pid: int
    tree: bool = True


def available() -> bool:
    return (PROC / str(os.getpid()) / "stat").exists()


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (which may hold spaces)."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:  # gone, or never there
        return None
    return text.rpartition(")")[2].split()


def cpu_seconds(pid: int) -> float | None:
    """User plus system CPU the process has used so far (all its threads)."""
    fields = _stat(pid)
    if fields is None:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def processes(watched: Watched) -> set[int]:
    """The watched process and, for a tree, its descendants now."""
    found = {watched.pid}
    if not watched.tree:
        return found
    children: dict[int, list[int]] = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields is not None:
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    todo = [watched.pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


class CpuMeter:
    """CPU seconds per named group between `start` and `stop`. A process that appears
    meanwhile counts in full (it ran only meanwhile); one that ends meanwhile is lost, so
    the figures can only be low, never high."""

    def __init__(self, groups: Mapping[str, Watched]) -> None:
        self.groups = dict(groups) if available() else {}
        self._before: dict[int, float] = {}

    def start(self) -> None:
        self._before = {}
        for watched in self.groups.values():
            for pid in processes(watched):
                seconds = cpu_seconds(pid)
                if seconds is not None:
                    self._before[pid] = seconds

    def stop(self) -> dict[str, float]:
        used: dict[str, float] = {}
        for name, watched in self.groups.items():
            total = 0.0
            for pid in processes(watched):
                seconds = cpu_seconds(pid)
                if seconds is not None:
                    total += seconds - self._before.get(pid, 0.0)
            used[name] = total
        return used
