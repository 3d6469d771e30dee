"""Unit tests mirror the source tree, so the tests of a module are found from its path:
``tests/unit/<package path>/test_<module>.py`` tests ``<package path>/<module>.py``. A test
file named after no module (a renamed or deleted module, a feature name) fails here, so the
mirror cannot rot. Checks of the whole repository, which test no one module, live in
``tests/unit/repo/``."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tests.support.paths import ROOT, TESTS

UNIT = TESTS / "unit"
REPO_WIDE = UNIT / "repo"
TOP_LEVEL = ("topics", "streams", "sinks")  # linked under memstream/, kept at the top


def module_paths(test_file: Path, unit: Path = UNIT, root: Path = ROOT) -> list[Path]:
    """Where the module a unit test file is named after would be: a module or a package."""
    folder = test_file.parent.relative_to(unit)
    name = test_file.stem.removeprefix("test_")
    top = folder.parts[0] if folder.parts else ""
    base = root / folder if top in TOP_LEVEL else root / "memstream" / folder
    return [base / f"{name}.py", base / name / "__init__.py"]


def strays(test_files: Iterable[Path], unit: Path = UNIT, root: Path = ROOT) -> list[str]:
    """Each test file outside the repo-wide folder whose module does not exist, with where
    it was looked for."""
    found = []
    for path in sorted(test_files):
        if path.is_relative_to(unit / "repo"):
            continue
        candidates = module_paths(path, unit, root)
        if not any(c.is_file() for c in candidates):
            looked = " or ".join(str(c.relative_to(root)) for c in candidates)
            found.append(f"{path.relative_to(root)} tests no module: there is no {looked}")
    return found


def test_every_unit_test_file_is_named_after_the_module_it_tests() -> None:
    files = list(UNIT.rglob("test_*.py"))
    assert len(files) > 50  # the mirror was found
    stray = strays(files)
    assert stray == [], (
        "unit tests mirror the source tree: name the file tests/unit/<package path>/"
        "test_<module>.py after the module it tests (or, for a check of the whole "
        "repository, put it in tests/unit/repo/):\n" + "\n".join(stray))


def test_every_folder_of_the_mirror_is_a_package() -> None:
    """Several folders hold a test_logic.py: as packages they import under distinct names."""
    folders = [p for p in UNIT.rglob("*") if p.is_dir() and p.name != "__pycache__"]
    missing = [str(p.relative_to(ROOT)) for p in [UNIT, *folders]
               if not (p / "__init__.py").is_file()]
    assert missing == [], f"add an __init__.py to: {', '.join(missing)}"


def test_the_check_names_a_stray_file_and_finds_modules_packages_and_linked_folders() -> None:
    here = [UNIT / "streams" / "memory" / "test_logic.py",  # streams/memory/logic.py
            UNIT / "kafka" / "test_compat.py",  # memstream/kafka/compat.py
            UNIT / "streams" / "llm" / "test_rules.py",  # the package streams/llm/rules/
            UNIT / "test_demo.py",  # memstream/demo.py
            REPO_WIDE / "test_anything.py"]  # repo-wide: not a module
    assert strays(here) == []
    (stray,) = strays([UNIT / "streams" / "memory" / "test_chunking.py"])
    assert stray.startswith("tests/unit/streams/memory/test_chunking.py tests no module")
    assert "streams/memory/chunking.py" in stray
