"""Every code block of the README and of docs/ runs, as written, the way a reader would run
it, so none can go stale:

- ``python`` blocks: each a whole script, against a real pipeline;
- ``sh`` blocks: the two setup commands are the ones CI runs (``.ci/run`` installs and runs
  the test command; this test runs the demo), and every other line is a ``memstream``
  command run in order in a fresh directory, as a reader following the page would.

Blocks fenced as ``text`` or ``json`` are listings and samples, not code.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import pipeline_env
from tests.support.pipeline import Pipeline

ROOT = Path(__file__).parents[2]
PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").rglob("*.md")
                                    if "node_modules" not in p.parts)]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.DOTALL | re.MULTILINE)
RUNNABLE = {"python", "sh"}
LISTINGS = {"text", "json", "yaml", "toml", "console"}
DEMO_COMMAND = (
    "python3 -m venv .venv && . .venv/bin/activate && pip install -q -e . && memstream demo")
MEMSTREAM = [sys.executable, "-m", "memstream"]
UI_PORT = 8765  # `memstream ui` without --port
EXTRAS: dict[str, list[str]] = tomllib.loads(
    (ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]


def blocks(language: str) -> list[tuple[Path, str]]:
    return [(page, body) for page in PAGES
            for lang, body in FENCE.findall(page.read_text(encoding="utf-8")) if lang == language]


def test_every_block_is_runnable_or_a_listing() -> None:
    unknown = sorted({f"{page.name}: ```{lang}" for page in PAGES
                      for lang, _ in FENCE.findall(page.read_text(encoding="utf-8"))
                      if lang not in RUNNABLE | LISTINGS})
    assert unknown == []  # a bare ``` fence says nothing of what the block is


def test_the_setup_commands_are_what_ci_runs() -> None:
    setup = [line for _, body in blocks("sh") for line in body.splitlines()
             if line.startswith("python3 -m venv")]
    ci_lines = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert DEMO_COMMAND in setup
    tests = [line for line in setup if line != DEMO_COMMAND]
    assert len(tests) == 1 and tests[0] in ci_lines  # CI runs the README's test command


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTREAM_")}
    env["COLUMNS"] = "200"
    return env


def test_the_demo_command_runs_the_whole_pipeline(tmp_path: Path) -> None:
    result = subprocess.run([*MEMSTREAM, "demo"], cwd=tmp_path, env=_env(),
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-2000:] + result.stdout[-2000:]
    out = result.stdout
    assert "Memories of cube 'demo-user'" in out
    assert "UserMemory" in out and "LongTermMemory" in out
    assert "绿茶" in out and "shellfish" in out
    assert "rules" in out  # the stand-in LLM is announced …
    assert (out + result.stderr).count("stand-in") == 1, out + result.stderr  # … once
    assert "search 'What should I avoid eating?'" in out and "allergic to shellfish" in out
    assert "working memory refresh" in out
    assert "Traceback" not in result.stderr
    assert not (tmp_path / ".memstream").exists()  # the demo keeps nothing behind


@pytest.fixture
def reader_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
    subprocess.run([*MEMSTREAM, "down"], cwd=tmp_path, env=_env(), capture_output=True,
                   timeout=120, check=False)  # never leave services behind


def _serve_once(args: list[str], cwd: Path) -> str:
    """Start a server command on its port (``--http``, ``--port`` or the page's default),
    wait until it answers, stop it."""
    import socket
    import time

    flag = "--http" if "--http" in args else "--port"
    port = int(args[args.index(flag) + 1]) if flag in args else UI_PORT
    proc = subprocess.Popen([*MEMSTREAM, *args[1:]], cwd=cwd, env=_env(),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"{' '.join(args)} ended: {proc.stdout.read()[-2000:]}"
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return f"served on {port}"
            time.sleep(0.5)
        raise AssertionError(f"{' '.join(args)} did not listen on {port} within 120 s")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_every_shell_line_runs_in_order(reader_dir: Path) -> None:
    outputs: dict[str, str] = {}
    for page, body in blocks("sh"):
        for line in body.splitlines():
            if not line.strip() or line.startswith("python3 -m venv"):
                continue
            args = shlex.split(line, comments=True)
            if args[:2] == ["pip", "install"]:  # an extra: declared, and in the dev extra here
                for extra in re.findall(r"(?:memstream|\.)\[(\w+)\]", line):
                    assert extra in EXTRAS and set(EXTRAS[extra]) <= set(EXTRAS["dev"]), line
                continue
            assert args[0] == "memstream", f"{page.name}: not a memstream command: {line}"
            if "--http" in args or args[1] == "ui":  # a server: it must come up, answer, stop
                outputs[args[1]] = _serve_once(args, reader_dir)
                continue
            # stdin at its end: a server on stdio (``mcp``) starts, finds the stack, and ends
            done = subprocess.run([*MEMSTREAM, *args[1:]], cwd=reader_dir, env=_env(),
                                  stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  timeout=300, check=False)
            text = done.stdout + done.stderr
            assert done.returncode == 0, f"{page.name}: {line}\n{text[-3000:]}"
            assert "Traceback" not in text, f"{page.name}: {line}\n{text[-3000:]}"
            outputs[args[1]] = done.stdout
    # what the README's tour promises a reader
    assert "worker running" in outputs["up"]
    assert re.search(r": \d+ memor(y|ies)", outputs["add"])  # what was added, counted
    assert "allergic to shellfish" in outputs["search"]
    assert "allergic to shellfish" in outputs["context"] and outputs["context"].startswith("#")
    assert "Lyon" in outputs["list"]
    assert "stopped" in outputs["down"] or "nothing was running" in outputs["down"]


async def _run_script(code: str, env: dict[str, str], cwd: Path) -> tuple[int, str, str]:
    import asyncio

    script = cwd / "example.py"
    script.write_text(code, encoding="utf-8")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(script), cwd=cwd, env=env, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 180)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_every_python_block_runs_as_written(pipeline: Pipeline, tmp_path: Path) -> None:
    found = blocks("python")
    assert len(found) >= 2
    env = pipeline_env(pipeline)
    outputs: dict[str, list[str]] = {}
    for page, code in found:
        rc, out, err = await _run_script(code, env, tmp_path)
        assert rc == 0, f"{page.name}\n{code}\n---\n{err[-3000:]}"
        assert "Traceback" not in err
        outputs.setdefault(page.name, []).append(out)
    tour = outputs["README.md"][0]
    assert "allergic to shellfish" in tour  # the search saw the write it waited for
    assert re.search(r"^added \S+$", tour, re.MULTILINE)  # the updates loop ran and ended
