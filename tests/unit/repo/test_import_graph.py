"""The package's seams hold, read from the code's own imports (deferred ones included: a
deferred import is still a dependency, and a cycle kept alive by deferring it).

- No module of the package (``memstream/``, ``topics/``, ``streams/``, ``sinks/``, the CLI)
  is part of an import cycle.
- Inside ``streams/`` no folder imports a folder that imports it back.
- A *room* is a folder of ``streams/`` that does work of its own: every stage (a folder with
  an ``agent.py``) and ``replay``. No room imports another room; the shared folders import no
  room; ``streams.worker`` is the one module that wires rooms together.
- The contract (``topics``) imports nothing of memstream but itself; storage imports no
  processing; the runtime of ``streams`` never reaches up into the app that wires it;
  nothing below the CLI imports it.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable
from pathlib import Path

import pytest

from tests.support.paths import ROOT

FOLDERS = ("memstream", "topics", "streams", "sinks")
LINKED = ("topics", "streams", "sinks")  # linked under memstream/: read once, at the top
STREAMS = ROOT / "streams"
STAGES = sorted(p.parent.name for p in STREAMS.glob("*/agent.py"))
ROOMS = sorted({*STAGES, "replay"})
WIRING = {"memstream.streams.worker"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] != "memstream":
        parts.insert(0, "memstream")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_files(root: Path = ROOT) -> Iterable[Path]:
    for folder in FOLDERS:
        for path in (root / folder).rglob("*.py"):
            inside = path.relative_to(root / folder).parts
            if folder == "memstream" and inside[0] in LINKED:
                continue  # the links: the same files, read from the top-level folders
            yield path


def _typing_only(tree: ast.Module) -> set[int]:
    """Ids of the nodes inside ``if TYPE_CHECKING:`` blocks: annotations only, never run."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) \
                and node.test.id == "TYPE_CHECKING":
            skipped.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skipped


def imports_of(path: Path) -> set[str]:
    """Every module name this file imports (``topics.x`` read as ``memstream.topics.x``),
    deferred imports included, typing-only ones not."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = _typing_only(tree)
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return {name if name.startswith("memstream") else f"memstream.{name}"
            for name in found if name.split(".")[0] in FOLDERS}


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Each module's imports of the package's modules (the checkout's own graph is parsed
    once per run: a dozen checks read it)."""
    return _checkout_graph() if root == ROOT else _graph(root)


@functools.cache
def _checkout_graph() -> dict[str, set[str]]:
    return _graph(ROOT)


def _graph(root: Path) -> dict[str, set[str]]:
    modules = {module_name(p) if root == ROOT else _name_under(p, root): p
               for p in package_files(root)}
    return {name: {m for m in imports_of(path) if m in modules and m != name}
            for name, path in modules.items()}


def _name_under(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[0] != "memstream":
        parts.insert(0, "memstream")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Each cycle found by a depth-first walk, as the path that closes it."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    found: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for target in sorted(edges.get(node, ())):
            if state.get(target) == 1:
                found.append([*path[path.index(target):], target])
            elif target not in state:
                visit(target, [*path, target])
        state[node] = 2

    for start in sorted(edges):
        if start not in state:
            visit(start, [start])
    return found


def folder_of(module: str) -> str | None:
    """The ``streams`` folder a module lies in (``None`` for modules at its top)."""
    parts = module.split(".")
    if parts[:2] != ["memstream", "streams"] or len(parts) < 4:
        return None
    return parts[2]


def room_of(module: str) -> str | None:
    folder = folder_of(module)
    return folder if folder in ROOMS else None


def test_the_rooms_are_found() -> None:
    assert {"commands", "extraction", "memory", "reorganize", "scheduler", "search",
            "replay"} <= set(ROOMS)


def test_the_cli_and_topics_are_read() -> None:
    modules = set(graph())
    assert {"memstream.cli.common", "memstream.client.client", "memstream.local.broker",
            "memstream.sinks.ports", "memstream.streams.replay.logic"} <= modules


def test_no_import_cycle_anywhere_in_the_package() -> None:
    assert cycles(graph()) == []


def test_no_cycle_between_folders_of_streams() -> None:
    edges: dict[str, set[str]] = {}
    for module, targets in graph().items():
        if (src := folder_of(module)) is None:
            continue
        for target in targets:
            if (dst := folder_of(target)) is not None and dst != src:
                edges.setdefault(src, set()).add(dst)
    assert cycles(edges) == []


def test_no_room_imports_another_room() -> None:
    crossings = sorted(
        f"{module} imports {target}"
        for module, targets in graph().items()
        for target in targets
        if room_of(module) and room_of(target) and room_of(module) != room_of(target)
    )
    assert crossings == []


def test_shared_modules_import_no_room() -> None:
    leaks = sorted(
        f"{module} imports {target}"
        for module, targets in graph().items()
        if module.startswith("memstream.streams") and not room_of(module)
        and module not in WIRING
        for target in targets
        if room_of(target)
    )
    assert leaks == []


def test_the_contract_imports_only_itself() -> None:
    """Any producer can depend on ``topics`` alone: it reaches no client, no launcher of
    local services, no processing and no storage."""
    wrong = sorted(f"{module} imports {target}"
                   for module, targets in graph().items()
                   if module.startswith("memstream.topics.")
                   for target in targets
                   if not target.startswith("memstream.topics."))
    assert wrong == []


@pytest.mark.parametrize(("lower", "upper"), [
    ("memstream.streams.runtime", "memstream.streams.app"),
    ("memstream.streams.runtime", "memstream.streams.worker"),
    ("memstream.security", "memstream.streams"),
    ("memstream.kafka", "memstream.streams"),
    ("memstream.history", "memstream.streams"),
    ("memstream.archive", "memstream.streams"),
    ("memstream.client", "memstream.streams"),
    ("memstream.sinks", "memstream.streams"),
    ("memstream.sinks", "memstream.cli"),
    ("memstream.streams", "memstream.cli"),
    ("memstream.local", "memstream.cli"),
])
def test_layers_point_one_way(lower: str, upper: str) -> None:
    wrong = sorted(f"{module} imports {target}"
                   for module, targets in graph().items()
                   if module == lower or module.startswith(lower + ".")
                   for target in targets
                   if target == upper or target.startswith(upper + "."))
    assert wrong == []


def _copy_package(tmp_path: Path) -> Path:
    for folder in FOLDERS:
        for path in package_files():
            if path.is_relative_to(ROOT / folder):
                target = tmp_path / path.relative_to(ROOT)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    return tmp_path


def test_the_check_sees_a_stage_import_from_replay(tmp_path: Path) -> None:
    """The walker is not blind: replay importing a stage's logic is a crossing."""
    root = _copy_package(tmp_path)
    sample = root / "streams" / "replay" / "sample.py"
    sample.write_text("def f():\n    from memstream.streams.memory.logic import add_memories\n"
                      "    return add_memories\n", encoding="utf-8")
    edges = graph(root)
    assert "memstream.streams.memory.logic" in edges["memstream.streams.replay.sample"]
    assert room_of("memstream.streams.replay.sample") == "replay"
    assert room_of("memstream.streams.memory.logic") == "memory"


def test_the_check_sees_a_cycle_in_the_cli(tmp_path: Path) -> None:
    root = _copy_package(tmp_path)
    common = root / "memstream" / "cli" / "common.py"
    common.write_text(common.read_text(encoding="utf-8")
                      + "\n\ndef f():\n    from memstream.cli.nodes import get\n    return get\n",
                      encoding="utf-8")
    assert any("memstream.cli.common" in c for c in cycles(graph(root)))
