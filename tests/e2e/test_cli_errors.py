"""Bad input to the command line: one readable line naming the field and the limit, exit
code 2, and nothing published (these run with no services at all, so anything that tried
to reach a broker would fail differently)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import MEMSTREAM, clean_env


def memstream(*args: str, cwd: Path, env: dict[str, str] | None = None,
              stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*MEMSTREAM, *args], cwd=cwd, env=env or clean_env(), input=stdin,
                          capture_output=True, text=True, timeout=60, check=False)


def error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The one error line, after checking there is nothing else a user would trip over."""
    text = result.stdout + result.stderr
    assert "Traceback" not in text and "errors.pydantic.dev" not in text, text
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, result.stderr
    return errors[0]


@pytest.mark.parametrize(("args", "expected"), [
    (["search", "where do I live?", "--top-k", "0"], ["--top-k", "0", "1<=x<=200"]),
    (["search", "where?", "--top-k", "201"], ["--top-k", "1<=x<=200"]),
    (["search", "where?", "--min-score", "1.5"], ["--min-score", "0<=x<=1"]),
    (["search", "where?", "--min-score", "-0.1"], ["--min-score", "0<=x<=1"]),
    (["search", ""], ["QUERY", "must not be empty"]),
    (["search", "   "], ["QUERY", "must not be empty"]),
    (["search", "hi", "--user", ""], ["--user", "must not be empty"]),
    (["search", "hi", "--cube", ""], ["--cube", "must not be empty"]),
    (["search", "hi", "--mode", "slow"], ["--mode", "fast", "fine"]),
    (["search", "hi", "--filter", "{tags"], ["--filter", "not JSON"]),
    (["search", "hi", "--filter", "[1, 2]"], ["--filter", "JSON object"]),
    (["context", "   "], ["QUERY", "must not be empty"]),
    (["context", "hi", "--budget", "0"], ["--budget", "x>=1"]),
    (["context", "hi", "--tokens", "-5"], ["--tokens", "x>=1"]),
    (["context", "hi", "--budget", "500", "--tokens", "100"], ["--budget or --tokens"]),
    (["add", "--text", "hi", "--chunk-size", "0"], ["--chunk-size", "1<=x<=100"]),
    (["add"], ["FILE", "--text"]),
    (["add", "missing.json"], ["missing.json", "no such file"]),
    (["add", "I live in Lyon."], ["no such file", "--text 'I live in Lyon.'"]),
    (["update", "some-id"], ["nothing to change"]),
    (["feedback", "some-id", "useless"],
     ["VERDICT", "'useless' is not one of 'wrong', 'outdated', 'irrelevant', 'confirmed'"]),
    (["feedback", "some-id", "irrelevant", "--query", " "], ["--query", "must not be empty"]),
    (["get"], ["IDS"]),
    (["dead-letters", "redrive"], ["--all"]),
    (["list", "--limit", "0"], ["--limit", "1<=x<=100000"]),
    (["replay", "--cube", "alice", "--shadow", "alice-v2", "--model", "gpt-x"],
     ["--model gpt-x", "no OpenAI-compatible endpoint", "--llm-base-url",
      "MEMSTREAM_LLM__BASE_URL", "nothing was published"]),
])
def test_bad_options_get_one_line_and_exit_2(tmp_path: Path, args: list[str],
                                            expected: list[str]) -> None:
    result = memstream(*args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    line = error_line(result)
    for fragment in expected:
        assert fragment in line, line


@pytest.mark.parametrize(("messages", "expected"), [
    ([{"role": "robot", "content": "hi"}],
     "message 0: role: must be one of 'user', 'assistant', 'system' or 'tool'"),
    ([{"role": "user", "content": "ok"}, {"role": "user", "content": ""}],
     "message 1: content: must not be empty"),
    ([{"role": "user", "content": "hi", "timestamp": "yesterday"}], "message 0: timestamp:"),
    ({"hello": "world"}, "chat.json: expected messages with 'role' and 'content'"),
])
def test_bad_messages_in_a_file_name_the_message_and_field(tmp_path: Path, messages: object,
                                                            expected: str) -> None:
    (tmp_path / "chat.json").write_text(json.dumps(messages), encoding="utf-8")
    result = memstream("add", "chat.json", "--user", "alice", cwd=tmp_path)
    assert result.returncode == 2
    assert expected in error_line(result)


def test_a_message_over_the_limit_is_refused_before_anything_is_published(
    tmp_path: Path,
) -> None:
    big = "x" * 40_000
    (tmp_path / "chat.json").write_text(json.dumps(
        [{"role": "user", "content": "short"}, {"role": "user", "content": big}]),
        encoding="utf-8")
    result = memstream("add", "chat.json", cwd=tmp_path)
    assert result.returncode == 2
    line = error_line(result)
    assert "40,000 characters" in line and "32,000" in line
    assert "MEMSTREAM_LIMITS__MESSAGE_CHARS" in line and "nothing was published" in line
    # the same through stdin, as a document over a lowered document limit
    env = {**clean_env(), "MEMSTREAM_LIMITS__DOCUMENT_CHARS": "1000"}
    doc = memstream("add", "-", "--doc", cwd=tmp_path, env=env, stdin="word " * 300)
    assert doc.returncode == 2
    assert "1,500 characters; the limit is 1,000 (MEMSTREAM_LIMITS__DOCUMENT_CHARS)" in \
        error_line(doc)


def test_a_shadow_model_with_an_endpoint_is_not_refused_for_it(tmp_path: Path) -> None:
    """With an endpoint given or configured, ``--model`` is taken (here it then fails only
    because no stack runs)."""
    given = memstream("replay", "--cube", "alice", "--shadow", "v2", "--model", "gpt-x",
                      "--llm-base-url", "http://127.0.0.1:9/v1", cwd=tmp_path)
    env = {**clean_env(), "MEMSTREAM_LLM__BASE_URL": "http://127.0.0.1:9/v1"}
    configured = memstream("replay", "--cube", "alice", "--shadow", "v2", "--model", "gpt-x",
                           cwd=tmp_path, env=env)
    for result in (given, configured):
        assert result.returncode == 1
        assert "no broker runs" in error_line(result)


def test_the_rules_warning_is_printed_once_per_process(tmp_path: Path) -> None:
    """A worker builds the stand-in once, a shadow replay builds another: one warning."""
    code = ("import logging; logging.basicConfig()\n"
            "from memstream.streams.llm.factory import create_llm\n"
            "from memstream.topics.settings import LLMSettings\n"
            "create_llm(LLMSettings()); create_llm(LLMSettings(model='other'))\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=clean_env(),
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("LLM provider 'rules'") == 1, result.stderr


def test_a_bad_setting_names_the_variable(tmp_path: Path) -> None:
    env = {**clean_env(), "MEMSTREAM_KAFKA__PARTITIONS": "zero"}
    result = memstream("status", cwd=tmp_path, env=env)
    assert result.returncode == 2
    line = error_line(result)
    assert "MEMSTREAM_" in line and "kafka.partitions" in line


def test_without_a_stack_the_error_names_the_directory_it_looked_in(tmp_path: Path) -> None:
    result = memstream("search", "anything", cwd=tmp_path)
    assert result.returncode == 1
    line = error_line(result)
    assert f"no broker runs in {tmp_path.resolve() / '.memstream'}" in line


def test_the_stack_is_found_from_a_subdirectory_and_status_names_it(tmp_path: Path) -> None:
    (tmp_path / ".memstream").mkdir()
    deep = tmp_path / "src" / "pkg"
    deep.mkdir(parents=True)
    found = json.loads(memstream("status", "--json", cwd=deep).stdout)
    assert found["data_dir"] == str(tmp_path.resolve() / ".memstream")
    table = memstream("status", cwd=deep).stdout
    assert str(tmp_path.resolve() / ".memstream") in table
    # MEMSTREAM_DATA_DIR wins over the walk
    env = {**clean_env(), "MEMSTREAM_DATA_DIR": str(tmp_path / "elsewhere")}
    assert json.loads(memstream("status", "--json", cwd=deep, env=env).stdout)["data_dir"] == \
        str(tmp_path.resolve() / "elsewhere")


def test_version(tmp_path: Path) -> None:
    import memstream as package

    result = memstream("--version", cwd=tmp_path)
    assert result.returncode == 0
    assert result.stdout.strip() == f"memstream, version {package.__version__}"
