"""The published AsyncAPI document is valid for the AsyncAPI tools themselves: the official
parser (@asyncapi/parser 3.x, from npm) reads it and the JSON Schemas it references. Node and
npm are part of the test environment (.ci/run installs the parser): without them this fails."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from memstream.topics import schema

CONTRACTS = schema.ROOT / schema.OUT


def _tools() -> tuple[str, str]:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.fail("node and npm are needed to validate docs/contracts/asyncapi.yaml with the "
                    "AsyncAPI parser (Node 18 or later; Debian: apt-get install nodejs npm)")
    if not (CONTRACTS / "node_modules" / "@asyncapi" / "parser").is_dir():
        subprocess.run([npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund"],
                       cwd=CONTRACTS, check=True, timeout=600)
    return node, npm


def _validate(node: str, document: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([node, "validate.mjs", str(document)], cwd=CONTRACTS,
                          capture_output=True, text=True, timeout=300)


def test_the_asyncapi_document_is_valid() -> None:
    node, _ = _tools()
    result = _validate(node, CONTRACTS / "asyncapi.yaml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "valid AsyncAPI 3.0.0" in result.stdout
    assert "0 warning(s)" in result.stdout, result.stdout


@pytest.mark.parametrize(("broken", "named"), [
    ("operation", "operations.extraction_receive_conversations.action"),
    ("payload", "components.messages.cube_views.payload"),
])
def test_the_validator_reports_errors(tmp_path: Path, broken: str, named: str) -> None:
    """A wrong operation, or a wrong type in a payload's JSON Schema, fails and is named: the
    validation above is not vacuous (it resolves and checks the schema files too)."""
    node, _ = _tools()
    shutil.copytree(CONTRACTS / "schemas", tmp_path / "schemas")
    text = (CONTRACTS / "asyncapi.yaml").read_text(encoding="utf-8")
    if broken == "operation":
        text = text.replace("action: receive", "action: get", 1)
    else:
        cube_views = tmp_path / "schemas" / "cube-views.json"
        payload = json.loads(cube_views.read_text(encoding="utf-8"))
        payload["properties"]["view"]["type"] = 5
        cube_views.write_text(json.dumps(payload), encoding="utf-8")
    (tmp_path / "asyncapi.yaml").write_text(text)
    result = _validate(node, tmp_path / "asyncapi.yaml")
    assert result.returncode == 1, result.stdout + result.stderr
    assert named in result.stderr, result.stderr
