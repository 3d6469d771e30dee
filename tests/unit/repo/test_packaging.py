"""What `pip install memstream` puts into a user's environment: one package, `memstream`.

The repository keeps its top-level folders (`topics/`, `streams/`, `sinks/`); they install as
`memstream.topics`, `memstream.streams` and `memstream.sinks` (symbolic links under
`memstream/`), and every import names them so.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.support.paths import ROOT

CODE = ("memstream", "topics", "streams", "sinks", "tests", "bench")
BARE = ("topics", "streams", "sinks")


def bare_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
        found += [f"{path.relative_to(ROOT)}:{node.lineno} {n}" for n in names
                  if n.split(".")[0] in BARE]
    return found


def test_every_import_names_the_memstream_namespace() -> None:
    files = [p for top in CODE for p in (ROOT / top).rglob("*.py")
             if not (top == "memstream" and p.relative_to(ROOT / top).parts[0] in BARE)]
    assert len(files) > 100
    assert [line for path in files for line in bare_imports(path)] == []


def test_the_wheel_holds_only_the_memstream_package(tmp_path: Path) -> None:
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
         "--wheel-dir", str(tmp_path), str(ROOT)],
        capture_output=True, text=True, timeout=300, check=False)
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = tmp_path.glob("memstream-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"memstream"}
    for package in ("topics", "streams", "sinks"):  # installed inside it, code and all
        assert f"memstream/{package}/__init__.py" in names
    assert "memstream/streams/llm/rules/__init__.py" in names
    assert "memstream/ui/page.html" in names


@pytest.mark.parametrize("package", ["topics", "streams", "sinks"])
def test_outside_the_repository_only_the_namespace_imports(tmp_path: Path, package: str) -> None:
    probe = (f"import importlib.util as u; print(u.find_spec('{package}') is None, "
             f"u.find_spec('memstream.{package}') is not None)")
    ran = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60, check=False)
    assert ran.stdout.split() == ["True", "True"], ran.stderr
