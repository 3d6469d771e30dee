"""What `memstream erase` looks for and how it reads a record (memstream/cli/erase_checks.py):
the texts it samples, the files it scans, and which records a reader holding the keys left
can still open."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from memstream.cli import erase_checks
from memstream.cli.erase_checks import (
    cube_of,
    key_files_with,
    kid_of,
    opened,
    probe_of,
    sample_probes,
    scan_files,
)
from memstream.security import keys
from memstream.topics.events import ConversationChunk
from memstream.topics.registry import CONVERSATIONS
from memstream.topics.sealing import seal

EN = "Zephyrine keeps her grandmother's brass astrolabe in a violet hatbox."
ZH = "我把祖母的铜制星盘藏在紫色帽盒里，只有泽菲琳知道。"


@pytest.fixture
def key_dir(tmp_path: Path) -> Iterator[Path]:
    directory = tmp_path / "keys"
    keys.activate(directory)
    try:
        yield directory
    finally:
        keys.release(directory)


def chunk(cube: str, text: str) -> ConversationChunk:
    return ConversationChunk(user_id=cube, messages=({  # type: ignore[arg-type]
        "id": "m1", "role": "user", "content": text, "timestamp": "2026-01-01T00:00:00Z"},))


def test_a_probe_is_the_longest_run_no_store_escapes_and_never_a_common_scrap() -> None:
    # the apostrophe is escaped in the graph server's append-only file: no probe spans it
    assert probe_of(EN) == "s brass astrolabe in a violet hatbox."
    assert probe_of(ZH) == ZH  # Chinese: 3 bytes a character, long enough
    assert probe_of("I'm ok.") is None and probe_of("") is None
    assert len(probe_of("word " * 40) or "") <= erase_checks.PROBE_CHARS


def test_samples_take_one_text_of_each_kind_before_a_second_of_any() -> None:
    texts = [("fact", "The user works as a nurse in Oslo."), ("fact", EN),
             ("message", ZH), ("episode", "user: " + EN + " And more words here.")]
    fact, message, episode = sample_probes(texts, n=3)
    assert fact == "s brass astrolabe in a violet hatbox." and message == ZH
    assert episode.startswith("s brass astrolabe in a violet hatbox. And")
    every = sample_probes(texts, n=10)
    assert len(every) == 4 == len(set(every))  # then the second fact; never one twice
    assert sample_probes([("fact", "too short")]) == []


def test_files_are_scanned_for_utf8_and_json_escaped_text_across_chunks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(erase_checks, "CHUNK", 7)  # every probe crosses a chunk boundary
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "aof").write_bytes(b"CREATE (:M {memory: '" + ZH.encode() + b"'})")
    (tmp_path / "store" / "doc.json").write_text(json.dumps({"memory": ZH}), encoding="utf-8")
    (tmp_path / "clean").write_bytes(b"nothing here" * 50)
    (tmp_path / "backups").mkdir()
    (tmp_path / "backups" / "zeph.json").write_text(EN, encoding="utf-8")
    probes = [ZH, "s brass astrolabe in a violet hatbox."]
    scan = scan_files(tmp_path, probes)
    assert scan.files == 4 and scan.hits == {"store/aof": {0}, "store/doc.json": {0},
                                             "backups/zeph.json": {1}}
    assert scan.found([1]) == {"backups/zeph.json": {1}}
    skipped = scan_files(tmp_path, probes, skip=[tmp_path / "backups"])
    assert skipped.files == 3 and "backups/zeph.json" not in skipped.hits


def test_a_record_opens_until_its_cubes_key_is_destroyed(key_dir: Path) -> None:
    raw = CONVERSATIONS.encode(chunk("zeph", EN))
    other = CONVERSATIONS.encode(chunk("olga", "Olga waters the ficus on Mondays."))
    assert cube_of(b"zeph", raw) == "zeph" and EN.encode() not in raw
    state, text = opened(raw)
    assert state == "opened" and EN in text
    old = kid_of(keys.Keyring(key_dir).get("zeph"))
    assert old is not None and key_files_with(key_dir, old)
    assert keys.destroy("zeph")
    assert opened(raw) == ("unreadable", "")
    assert opened(other)[0] == "opened"  # another cube's records stay readable
    assert key_files_with(key_dir, old) == []
    assert opened(b'{"cube_id":"zeph","command":"delete"}')[0] == "plain"


def test_the_schedulers_state_is_found_by_its_cube_and_read_like_any_record(
        key_dir: Path) -> None:
    state = json.dumps({"sealed": seal("zeph", json.dumps({"last_answer": EN}).encode())
                        .decode()}).encode()
    assert cube_of(b"zeph\x1fzeph", state) == "zeph"
    assert cube_of(None, state) == "zeph"  # named inside the sealed value, not by the key
    assert EN in opened(state)[1]
    keys.destroy("zeph")
    assert opened(state) == ("unreadable", "")
