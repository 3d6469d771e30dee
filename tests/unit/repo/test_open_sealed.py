"""The decoder docs/contracts.md shows for other languages opens what memstream seals: every
topic's sample events, sealed in Python, opened by docs/contracts/open-sealed.mjs (Node's own
crypto and zlib), give the event's plain JSON. Node is part of the test environment."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from memstream.security.keys import activate, release
from memstream.topics import schema
from memstream.topics.registry import BY_SUFFIX
from memstream.topics.sealing import SEALED_KEY
from tests.unit.topics.samples import samples

SCRIPT = schema.ROOT / schema.OUT / "open-sealed.mjs"


def test_node_opens_every_sealed_field(tmp_path: Path) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is needed to run docs/contracts/open-sealed.mjs (Node 18 or later)")
    plain, sealed = [], []
    activate(tmp_path)
    try:
        for suffix, events in samples().items():
            spec = BY_SUFFIX[suffix]
            for event in events:
                plain.append(json.loads(spec.plain(event)))
                sealed.append(spec.encode(event).decode())
    finally:
        release(tmp_path)
    assert sum(f'"{SEALED_KEY}"' in value for value in sealed) >= 10
    assert any('"zip":"deflate"' in value for value in sealed)
    result = subprocess.run([node, str(SCRIPT), str(tmp_path)], input="\n".join(sealed),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert [json.loads(line) for line in result.stdout.splitlines()] == plain


def test_the_page_shows_the_decoder_that_is_tested() -> None:
    page = (schema.ROOT / schema.DOC).read_text(encoding="utf-8")
    shown = next(block for block in re.findall(r"^```\w*\n(.*?)^```", page, re.S | re.M)
                 if "function openValues" in block)
    function = shown[shown.index("function openValues"):]
    assert function in SCRIPT.read_text(encoding="utf-8")
