"""Every command docs/cli.md shows is one ``memstream`` runs, and ``mcp`` stays lazy."""

from __future__ import annotations

import re
import subprocess
import sys

import click
from click.testing import CliRunner

from memstream.cli import main
from tests.support.paths import ROOT

CLI_MD = ROOT / "docs" / "cli.md"
WORD = re.compile(r"[a-z][a-z-]*")


def _path(words: list[str]) -> tuple[str, ...]:
    """The leading lowercase words of a span: a command and, under a group, its subcommand."""
    path: list[str] = []
    for word in words:
        if not WORD.fullmatch(word) or (path and not isinstance(_command(path), click.Group)):
            break
        path.append(word)
    return tuple(path)


def _command(path: list[str] | tuple[str, ...]) -> click.Command | None:
    command: click.Command | None = main
    for name in path:
        if not isinstance(command, click.Group):
            return None
        command = command.commands.get(name)
    return command


def documented() -> set[tuple[str, ...]]:
    """``memstream NAME`` in any code span, and bare ``NAME …`` spans in the command table
    (``unfreeze``, ``dead-letters redrive …``)."""
    found: set[tuple[str, ...]] = set()
    for line in CLI_MD.read_text().splitlines():
        for span in re.findall(r"`([^`]+)`", line):
            for after in re.findall(r"\bmemstream ([^|]+)", span):
                found.add(_path(after.split()))
            if line.startswith("| `memstream") and "memstream" not in span:
                found.add(_path(span.split()))
    return {path for path in found if path}


def test_every_command_in_docs_cli_md_is_registered() -> None:
    paths = documented()
    assert ("unfreeze",) in paths and ("dead-letters", "redrive") in paths
    assert len({path[0] for path in paths}) > 20
    missing = sorted(" ".join(path) for path in paths if _command(path) is None)
    assert missing == []
    for path in paths:
        result = CliRunner().invoke(main, [*path, "--help"], prog_name="memstream")
        assert result.exit_code == 0, result.output
        assert result.output.startswith(f"Usage: memstream {' '.join(path)} ")


def test_the_mcp_command_does_not_import_the_sdk_until_it_runs() -> None:
    """Without the ``mcp`` extra, the rest of the CLI (and ``mcp --help``) must still work."""
    code = ("import sys; from click.testing import CliRunner; from memstream.cli import main; "
            "result = CliRunner().invoke(main, ['mcp', '--help'], prog_name='memstream'); "
            "assert result.exit_code == 0, result.output; "
            "print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith('mcp.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.strip() == "[]"
