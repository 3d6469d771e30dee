"""A checkout whose links under memstream/ did not survive fails with one line saying how to
fix it, not with an import traceback."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.paths import ROOT


def test_a_checkout_without_links_says_how_to_fix_it(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "memstream", tmp_path / "memstream", symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__", "topics", "streams", "sinks"))
    for name in ("topics", "streams", "sinks"):
        (tmp_path / "memstream" / name).write_text(f"../{name}")  # what git writes without links
    done = subprocess.run([sys.executable, "-c", "import memstream"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "memstream/topics, memstream/streams, memstream/sinks" in lines[0]
    assert "git config core.symlinks true" in lines[0]
    assert "Traceback" not in done.stderr


def test_the_links_are_folders_here() -> None:
    for name in ("topics", "streams", "sinks"):
        assert (ROOT / "memstream" / name).is_dir()
        assert (ROOT / "memstream" / name).resolve() == ROOT / name
