"""The repository keeps ``topics/``, ``streams/`` and ``sinks/`` at its top level and links
them under ``memstream/`` so they import (and install) as ``memstream.topics`` and so on. A
checkout made without symlink support holds small text files there instead; this says so in
one line, with the fix, instead of an import traceback about a missing module."""

from __future__ import annotations

from pathlib import Path

LINKED = ("topics", "streams", "sinks")


def broken_links(package: Path) -> list[str]:
    """The linked folders that are not folders in ``package`` (a checkout without links)."""
    return [name for name in LINKED if not (package / name).is_dir()]


def check_links(package: Path) -> None:
    broken = broken_links(package)
    if broken:
        names = ", ".join(f"memstream/{name}" for name in broken)
        raise SystemExit(
            f"memstream: {names} should link to the top-level folders of the same name, but "
            "this checkout has no symlinks there; enable them and check out again "
            "(git config core.symlinks true && git checkout -- memstream), or install with "
            "pip install . (which copies the folders)")
