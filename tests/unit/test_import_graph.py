"""The package seams hold: no stage imports another stage, and ``streams`` has no import cycle.

A stage is a package under ``streams/`` with an ``agent.py`` (it consumes a topic). What
several stages share lives in ``streams.core``; ``streams.worker`` is the one module that
wires stages. Every import counts, including those deferred inside a function, because a
deferred import is still a dependency (and a cycle kept alive by deferring it).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STREAMS = ROOT / "streams"
STAGES = sorted(p.parent.name for p in STREAMS.glob("*/agent.py"))


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """Every ``streams.…`` module this file imports, resolved to the importing module names."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    found = {name.removeprefix("memstream.") for name in found}  # installed under memstream
    return {name for name in found if name == "streams" or name.startswith("streams.")}


def graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in STREAMS.rglob("*.py")}
    return {name: {m for m in imports_of(path) if m in modules and m != name}
            for name, path in modules.items()}


def stage_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in STAGES else None


def test_the_stages_are_found() -> None:
    assert {"commands", "extraction", "memory", "reorganize", "scheduler", "search"} <= set(STAGES)


def test_no_stage_imports_another_stage() -> None:
    crossings = sorted(
        f"{module} imports {target}"
        for module, targets in graph().items()
        for target in targets
        if stage_of(module) and stage_of(target) and stage_of(module) != stage_of(target)
    )
    assert crossings == []


@pytest.mark.parametrize("shared", [f"streams.{name}" for name in (
    "core", "runtime", "app", "prompts", "llm", "embed")])
def test_shared_modules_import_no_stage(shared: str) -> None:
    leaks = sorted(
        f"{module} imports {target}"
        for module, targets in graph().items()
        if module == shared or module.startswith(shared + ".")
        for target in targets
        if stage_of(target)
    )
    assert leaks == []


def test_no_import_cycle_in_streams() -> None:
    edges = graph()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for target in sorted(edges[node]):
            if state.get(target) == 1:
                cycles.append([*path[path.index(target):], target])
            elif target not in state:
                visit(target, [*path, target])
        state[node] = 2

    for start in sorted(edges):
        if start not in state:
            visit(start, [start])
    assert cycles == []


def test_the_check_sees_a_crossing(tmp_path: Path) -> None:
    """The walker is not blind: a stage module importing another stage is reported."""
    sample = tmp_path / "sample.py"
    sample.write_text("def f():\n    from streams.search.logic import answer\n    return answer\n",
                      encoding="utf-8")
    target = ".".join(["streams", "search", "logic"])
    assert target in imports_of(sample)
    assert stage_of(target) == "search"
