"""Any Kafka client can use memstream: the Node example (examples/node, kafkajs) and kcat
against the stack `memstream up` runs, with no Python on their side.

With erasure on (the default), Node publishes a chunk, fetches the cube's data key over
request/reply (wrapped for its RSA key), prints the memories its chunk became with their
text unsealed, and finds one by searching; kcat shows the same records as readable JSON whose
sealed fields are envelopes. With erasure off, kcat shows the whole record in plain.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args

import pytest

from memstream.security.keys import Keyring
from memstream.topics.events import UpdateAction
from memstream.topics.sealing import key_id

EXAMPLE = Path(__file__).parents[2] / "examples" / "node"
ACTIONS = set(get_args(UpdateAction))
EVENT_ID = re.compile(r"^[0-9a-f]{32}$")


def tool(name: str) -> str:
    """A program the test drives; missing, the test fails (CI installs them: .ci/run)."""
    path = shutil.which(name)
    assert path is not None, f"{name} is not installed (.ci/run installs it)"
    return path


def memstream(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTREAM_")}
    return subprocess.run([sys.executable, "-m", "memstream", *args], cwd=cwd,
                          env={**clean, **env}, capture_output=True, text=True, timeout=180,
                          check=False)


@pytest.fixture(scope="module")
def example() -> Path:
    """examples/node with its pinned dependencies installed (`npm ci` when missing)."""
    tool("node")
    if not (EXAMPLE / "node_modules" / "kafkajs").is_dir():
        done = subprocess.run([tool("npm"), "ci", "--no-audit", "--no-fund"], cwd=EXAMPLE,
                              capture_output=True, text=True, timeout=600, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
    return EXAMPLE


def stack(directory: Path, **env: str) -> Iterator[str]:
    """`memstream up` in ``directory``; yields the broker's address; `down` whatever happens."""
    try:
        up = memstream(["up"], directory, **env)
        assert up.returncode == 0, up.stdout + up.stderr
        info = json.loads((directory / ".memstream" / "worker.json").read_text())
        yield str(info["bootstrap"])
    finally:
        memstream(["down"], directory)


@pytest.fixture
def sealed_stack(tmp_path: Path) -> Iterator[str]:
    yield from stack(tmp_path)


@pytest.fixture
def plain_stack(tmp_path: Path) -> Iterator[str]:
    yield from stack(tmp_path, MEMSTREAM_ERASURE__ENABLED="false")


def run_example(example: Path, bootstrap: str, user: str) -> list[str]:
    """The example's output lines; node alone (no PATH: nothing else can be called)."""
    done = subprocess.run([tool("node"), "memstream-example.mjs", bootstrap, user,
                           "--timeout", "150"], cwd=example, env={"LANG": "C.UTF-8"},
                          capture_output=True, text=True, timeout=180, check=False)
    print(done.stdout, done.stderr, sep="\n")
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.splitlines()


def added(lines: list[str]) -> dict[str, str]:
    """Node id -> text of the ``added`` lines."""
    found = (re.match(r"^added (\S+) \[\w+\]: (.*)$", line) for line in lines)
    return {m[1]: m[2] for m in found if m}


def chunk_of(lines: list[str]) -> str:
    (chunk,) = [m[1] for line in lines if (m := re.match(r"^published chunk (\w+) ", line))]
    return chunk


def kcat(bootstrap: str, topic: str) -> list[tuple[dict[str, str], bytes, Any]]:
    """Every record of a topic as kcat prints it (-J): headers, the raw value, the value
    parsed as JSON (which every value must be)."""
    done = subprocess.run([tool("kcat"), "-C", "-b", bootstrap, "-t", topic, "-e", "-q", "-J"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    records = []
    for line in done.stdout.splitlines():
        record = json.loads(line)
        pairs = record["headers"] or []
        headers = dict(zip(pairs[::2], pairs[1::2], strict=True))
        records.append((headers, record["payload"].encode(), json.loads(record["payload"])))
    assert records, f"kcat read nothing from {topic}"
    return records


def assert_readable_updates(bootstrap: str) -> list[dict[str, Any]]:
    """Every memory.updates value says what happened in plain JSON: id, cube, action, node."""
    updates = []
    for headers, _raw, value in kcat(bootstrap, "memstream.memory.updates"):
        assert EVENT_ID.match(value["event_id"]) and headers["ce_id"] == value["event_id"]
        assert isinstance(value["cube_id"], str) and value["action"] in ACTIONS, value
        assert headers["ce_type"].startswith("memstream.MemoryUpdate.v")
        if value["action"] == "added":
            assert isinstance(value["node_id"], str), value
        updates.append(value)
    return updates


def sealed_ref(value: Any) -> bool:
    """A sealed field: a reference into its record's ``$sealed`` envelope."""
    return isinstance(value, dict) and isinstance(value.get("$sealed"), int)


def test_node_reads_sealed_memories_with_the_fetched_key_and_kcat_reads_the_log(
        example: Path, sealed_stack: str, tmp_path: Path) -> None:
    first = run_example(example, sealed_stack, "nora")
    assert first[0].startswith("no data key: NoDataKey: cube 'nora' has no data key")
    assert "3 messages, plain)" in first[1]  # a new cube: nothing to seal with yet
    (kid,) = [m[1] for line in first if (m := re.match(r"^data key (\w+) of cube nora", line))]
    key = Keyring(tmp_path / ".memstream" / "keys").get("nora")
    assert key is not None and kid == key_id(key)  # the cube's own key, unwrapped by Node
    texts = added(first)
    assert any("allergic to peanuts" in t for t in texts.values()), first
    assert any("Ines lives in Porto" in t for t in texts.values()), first
    assert [line for line in first if line.startswith("hit ") and "allergic to peanuts" in line]

    # kcat: the chunk's items are readable JSON with what was said sealed, under that key
    chunk = chunk_of(first)
    items = [(raw, v) for _h, raw, v in kcat(sealed_stack, "memstream.memory.items")
             if v.get("chunk_event_id") == chunk]
    assert {v["id"] for _raw, v in items} == set(texts)
    for raw, value in items:
        assert sealed_ref(value["memory"]) and value["$sealed"]["alg"] == "A256GCM", value
        assert value["$sealed"]["kid"] == kid, value
        assert b"peanuts" not in raw and b"Porto" not in raw
    updates = assert_readable_updates(sealed_stack)
    causes = {v["event_id"] for _raw, v in items}
    assert {u["node_id"] for u in updates if u["action"] == "added"
            and u.get("cause_event_id") in causes} == set(texts)

    # again: the cube has a key now, so Node seals what is said, and the worker opens it
    second = run_example(example, sealed_stack, "nora")
    assert second[0] == f"data key {kid} of cube nora: unwrapped (RSA-OAEP-256)"
    assert "3 messages, sealed)" in second[1]
    assert any("allergic to peanuts" in t for t in added(second).values()), second
    chunks = {v["event_id"]: v for _h, _raw, v in kcat(sealed_stack, "memstream.conversations")}
    assert not sealed_ref(chunks[chunk]["messages"][0]["content"])
    assert sealed_ref(chunks[chunk_of(second)]["messages"][0]["content"])


def test_with_erasure_off_kcat_shows_every_record_whole(
        example: Path, plain_stack: str) -> None:
    lines = run_example(example, plain_stack, "olga")
    assert sum(line.startswith("no data key: NoDataKey") for line in lines) == 2
    texts = added(lines)
    assert any("allergic to peanuts" in t for t in texts.values()), lines
    assert [line for line in lines if line.startswith("hit ") and "allergic to peanuts" in line]

    updates = assert_readable_updates(plain_stack)
    assert {u["node_id"] for u in updates if u["action"] == "added"} >= set(texts)
    chunk = chunk_of(lines)
    items = [(raw, v) for _h, raw, v in kcat(plain_stack, "memstream.memory.items")
             if v.get("chunk_event_id") == chunk]
    assert {v["id"] for _raw, v in items} == set(texts)
    assert any(v["memory"] == "I'm allergic to peanuts and I love Thai food."
               for _raw, v in items)
    for topic in ("memory.updates", "memory.items", "conversations"):
        assert not [raw for _h, raw, _v in kcat(plain_stack, f"memstream.{topic}")
                    if b'"$sealed"' in raw], topic
