"""The code map holds: no import circles, dependencies point one way, and every module fits
a room (docs: Development, Code map).

Read from the source with `ast`, lazy imports inside functions included, so a circle cannot
hide behind an import placed in a function body.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"server": "brain.server", "clients": "brain.clients"}
# Lower layers never import higher ones; entry points (admin, measure) sit on top.
RANK = {"storage": 0, "domain": 1, "edge": 2, "runtime": 3}
LEAVES = {"telemetry", "errors"}
ENTRY_POINTS = {"admin", "measure"}


def import_graph() -> dict[str, set[str]]:
    modules: dict[str, set[str]] = {}
    for folder, package in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            if "v1" in path.parts:
                continue
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            imported: set[str] = set()
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    imported.add(node.module)
                    imported.update(f"{node.module}.{a.name}" for a in node.names)
            modules[".".join([package, *parts])] = imported
    return {
        name: {m for m in imported if m in modules and m != name and not name.startswith(m + ".")}
        for name, imported in modules.items()
    }


def test_no_module_imports_itself_through_others() -> None:
    graph = import_graph()
    assert "brain.server.domain.memories.reads" in graph  # the tree was read (control)
    assert graph["brain.server.edge.memory"]  # and its imports were found
    circles = set()
    for start in graph:
        stack = [(start, (start,))]
        while stack:
            node, path = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    circles.add(tuple(sorted(path)))
                elif nxt not in path and len(path) < 8:
                    stack.append((nxt, (*path, nxt)))
    assert circles == set()


def test_dependencies_point_one_way() -> None:
    graph = import_graph()
    upward = []
    for name, imported in graph.items():
        layer = name.split(".")[2] if name.startswith("brain.server.") else ""
        for target in imported:
            if not target.startswith("brain.server."):
                continue
            to = target.split(".")[2]
            if layer in RANK and to in RANK and RANK[to] > RANK[layer]:
                upward.append((name, target))
            if layer in RANK.keys() - {"runtime"} | LEAVES and to in ENTRY_POINTS | {"runtime"}:
                upward.append((name, target))
            if layer in LEAVES and to in RANK:
                upward.append((name, target))
    # Control: the rule sees real downward edges, so an empty list is not an empty graph.
    assert ("brain.server.edge.memory", "brain.server.domain.memories") in {
        (n, t) for n, ts in graph.items() for t in ts
    }
    assert upward == []


MAX_MODULE_LINES = 600


def test_every_hand_written_module_fits_a_room() -> None:
    """No hand-written module of server/, clients/ or authz/ is over 600 lines (split by
    what a reader looks for); generated code (clients/v1) is exempt."""
    sizes = {
        str(path.relative_to(ROOT)): len(path.read_text().splitlines())
        for folder in ("server", "clients", "authz")
        for path in (ROOT / folder).rglob("*.py")
        if "v1" not in path.relative_to(ROOT).parts
    }
    assert "server/runtime/app.py" in sizes  # the tree was read (control)
    assert {name: n for name, n in sizes.items() if n > MAX_MODULE_LINES} == {}


def test_the_modules_scheduled_first_exist() -> None:
    """tests/conftest.py LONGEST_FIRST names test modules that exist, once each (a renamed
    one would silently lose its early start)."""
    from .conftest import LONGEST_FIRST

    missing = [name for name in LONGEST_FIRST if not (ROOT / "tests" / f"{name}.py").exists()]
    assert missing == []
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)
