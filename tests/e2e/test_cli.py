"""The `memstream` command line, run as a user runs it: separate processes, one data dir."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

MEMSTREAM = [sys.executable, "-m", "memstream"]


def run(args: list[str], cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTREAM_")}
    env["COLUMNS"] = "200"  # rich tables wide enough to assert on whole lines
    return subprocess.run([*MEMSTREAM, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
    run(["down"], tmp_path)  # never leave services behind, whatever the test did


def test_up_add_search_status_down(workdir: Path) -> None:
    conversation = [{"session_id": "s1", "messages": [
        {"role": "user", "content": "I'm allergic to peanuts and I love Thai food."},
        {"role": "assistant", "content": "Maybe try green curry without peanuts."},
        {"role": "user", "content": "My brother Leo lives in Montreal and works as a chef."},
    ]}]
    (workdir / "conv.json").write_text(json.dumps(conversation), encoding="utf-8")

    up = run(["up"], workdir)
    assert up.returncode == 0, up.stderr + up.stdout
    assert "worker running" in up.stdout
    assert (workdir / ".memstream" / "worker.json").exists()

    added = run(["add", "conv.json", "--user", "alice"], workdir)
    assert added.returncode == 0, added.stderr + added.stdout
    assert "added 3 messages in 1 chunk to cube 'alice'" in added.stdout

    # statements only (the episode, the whole chunk as said, would hold Montreal too)
    found = run(["search", "what am I allergic to?", "--user", "alice", "--top-k", "1",
                 "--type", "UserMemory"], workdir)
    assert found.returncode == 0, found.stderr + found.stdout
    assert "1 result for" in found.stdout and "allergic to peanuts" in found.stdout
    assert "Montreal" not in found.stdout

    other = run(["search", "peanuts", "--user", "bob"], workdir)
    assert other.returncode != 0 and "has no memories" in other.stderr

    status = run(["status"], workdir)
    assert "pid" in status.stdout and "memstream.conversations" in status.stdout
    assert "worker metrics" in status.stdout
    # --json carries the metrics the table shows (issue #27.9)
    metrics = json.loads(run(["status", "--json"], workdir).stdout)["metrics"]
    assert metrics is not None and "error" not in metrics, metrics
    assert metrics["url"] in status.stdout
    stages = metrics["stages"]
    assert stages and metrics["records"] == sum(s["records"] for s in stages.values()) > 0
    for name, stage in stages.items():
        assert name in status.stdout
        assert set(stage) == {"records", "records_per_second", "dead_letters", "retries"}
    assert metrics["dead_letters"] == 0 and metrics["turns"] >= 2
    assert {"calls", "tokens", "calls_by_task", "tokens_by_kind"} <= set(metrics["llm"])
    assert metrics["per_turn"] is not None and "calls" in metrics["per_turn"]
    # from a subdirectory, the same stack (the nearest .memstream upwards), named
    (workdir / "sub" / "dir").mkdir(parents=True)
    nested = run(["status"], workdir / "sub" / "dir")
    assert "pid" in nested.stdout and str(workdir.resolve() / ".memstream") in nested.stdout

    down = run(["down"], workdir)
    assert "stopped: worker, FalkorDB, broker" in down.stdout
    after = run(["status"], workdir)
    assert after.stdout.count("not running") == 3


def test_add_rejects_a_file_that_is_not_messages(workdir: Path) -> None:
    (workdir / "bad.json").write_text('{"hello": "world"}', encoding="utf-8")
    result = run(["add", "bad.json"], workdir)
    assert result.returncode != 0
    assert "expected a list of messages or sessions" in result.stderr or \
        "expected messages" in result.stderr
