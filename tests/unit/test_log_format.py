"""How record values are written (compact JSON a person can read, what people said sealed
field by field) and that every older form still reads: values deflated by hand, sealed whole
in binary, the first JSON envelope, MemoryUpdate version 1."""

from __future__ import annotations

import json
import zlib
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import ValidationError

from memstream.security import keys
from memstream.streams.runtime.stage import RawRecord, decode
from memstream.topics import codec, legacy, sealing
from memstream.topics.events import (
    MEMORY_UPDATE_VERSION,
    ConversationChunk,
    ExtractedMemory,
    MemoryUpdate,
)
from memstream.topics.limits import LimitExceeded
from memstream.topics.models import MemoryItem, MemoryMetadata, SourceRef, UsageRecord
from memstream.topics.registry import (
    ALL_TOPICS,
    CONVERSATIONS,
    MEMORY_ITEMS,
    MEMORY_UPDATES,
    REQUESTS,
)
from memstream.topics.settings import LimitsSettings

AT = datetime(2026, 3, 1, 9, tzinfo=UTC)


def node(usage: int = 0) -> MemoryItem:
    return MemoryItem(id="n1", memory="The user lives in Porto and works as a nurse.",
                      metadata=MemoryMetadata(
                          user_id="ann", cube_id="ann", memory_type="LongTermMemory",
                          tags=("porto", "work"), sources=(SourceRef(message_id="m1"),),
                          created_at=AT, updated_at=AT,
                          usage=tuple(UsageRecord(at=AT, requester="r", query=f"q{i}")
                                      for i in range(usage))))


def test_compressed_values_round_trip_and_short_ones_stay_as_they_are() -> None:
    text = json.dumps({"memory": "the user likes tea " * 40}).encode()
    packed = codec.deflate(text)
    assert packed.startswith(codec.MAGIC) and len(packed) < len(text) / 4
    assert codec.inflate(packed) == text
    assert codec.deflate(b'{"a":1}') == b'{"a":1}' and codec.inflate(b'{"a":1}') == b'{"a":1}'


def test_a_compression_bomb_or_a_damaged_value_is_refused() -> None:
    packer = zlib.compressobj(9, zlib.DEFLATED, -15, zdict=codec.DICTIONARY_1)
    for bomb in (codec.MAGIC_ZLIB + zlib.compress(b" " * 2_000_000),
                 codec.MAGIC + packer.compress(b" " * 2_000_000) + packer.flush()):
        with pytest.raises(codec.Unreadable, match="more than 1,000"):
            codec.inflate(bomb, max_bytes=1_000)
    for marker in (codec.MAGIC, codec.MAGIC_ZLIB):
        with pytest.raises(ValidationError, match="does not inflate"):
            CONVERSATIONS.decode(marker + b"not zlib at all")
    cut = codec.deflate(json.dumps({"memory": "the user likes tea " * 40}).encode())[:-4]
    with pytest.raises(codec.Unreadable, match="cut short"):
        codec.inflate(cut)


def test_values_of_the_first_compressed_form_still_open() -> None:
    """``\x00z1`` (zlib, no dictionary) was written before the primed form."""
    text = json.dumps({"schema_version": 1, "memory": "the user likes tea " * 4}).encode()
    assert codec.inflate(codec.MAGIC_ZLIB + zlib.compress(text)) == text


def test_the_dictionary_makes_a_small_event_smaller() -> None:
    """The primed form against plain zlib on a short compact update: field names cost bits."""
    update = MemoryUpdate(user_id="locomo-conv-26-melanie", action="added", stage="memory.add",
                          node_id="3de0a90f-cd2b-5dd5-a7d1-35a230a0a9aa",
                          memory_type="LongTermMemory", occurred_at=AT,
                          related_ids=("6627105f-3471-5c9f-8ecf-fd02f01eb876",),
                          cause_event_id="780ef067feb4573fb9a005381f0b276e")
    text = MEMORY_UPDATES.plain(update)
    primed, plain = codec.deflate(text), codec.MAGIC_ZLIB + zlib.compress(text, 9)
    assert primed.startswith(codec.MAGIC) and len(primed) < 0.85 * len(plain)
    assert codec.inflate(primed) == text


def test_without_erasure_a_value_is_the_events_json_whole() -> None:
    item = ExtractedMemory(user_id="ann", memory="The user lives in Porto. " * 20)
    raw = MEMORY_ITEMS.encode(item)
    assert raw == MEMORY_ITEMS.plain(item) and json.loads(raw)["memory"] == item.memory
    assert not sealing.is_sealed(raw)


def test_sealed_fields_leave_the_structure_readable_and_open_with_the_key(
    tmp_path: Path,
) -> None:
    keys.activate(tmp_path)
    try:
        item = ExtractedMemory(user_id="ann", memory="The user lives in Porto. " * 20,
                               key="home", tags=("porto",), occurred_at=AT,
                               memory_type="UserMemory")
        raw = MEMORY_ITEMS.encode(item)
        data = json.loads(raw)  # plain JSON: ids, cube, types, times as they are
        assert (data["cube_id"], data["event_id"]) == ("ann", item.event_id)
        assert data["memory_type"] == "UserMemory" and b"Porto" not in raw
        refs = [data[field] for field in ("memory", "key", "tags")]  # each in its place
        assert sorted(ref[sealing.SEALED_KEY] for ref in refs) == [0, 1, 2]
        envelope = data[sealing.SEALED_KEY]  # one per record, holding the values
        assert envelope["alg"] == "A256GCM" and len(envelope["kid"]) == 16
        assert envelope["zip"] == "deflate"  # long text is deflated before it is sealed
        assert MEMORY_ITEMS.decode(raw) == item
        ct = envelope["ct"]
        envelope["ct"] = ("A" if ct[0] != "A" else "B") + ct[1:]
        with pytest.raises(ValidationError, match="no longer exists"):
            MEMORY_ITEMS.decode(json.dumps(data).encode())
        moved = json.loads(raw)
        moved["cube_id"] = "bob"  # a field cannot be moved to another cube's event
        keys.activate(tmp_path)
        try:
            with pytest.raises(ValidationError):
                MEMORY_ITEMS.decode(json.dumps(moved).encode())
        finally:
            keys.release(tmp_path)
        assert keys.destroy("ann")
        with pytest.raises(ValidationError, match="cube 'ann' was erased"):
            MEMORY_ITEMS.decode(raw)
    finally:
        keys.release(tmp_path)


def test_an_event_with_nothing_to_seal_stays_whole_and_makes_no_key(tmp_path: Path) -> None:
    keys.activate(tmp_path)
    try:
        update = MemoryUpdate(user_id="ann", action="added", stage="memory.add", node_id="n1",
                              memory_type="UserMemory", occurred_at=AT)
        assert MEMORY_UPDATES.encode(update) == MEMORY_UPDATES.plain(update)
        assert not list(tmp_path.iterdir())  # no data key made for a cube with nothing sealed
    finally:
        keys.release(tmp_path)


def test_values_sealed_whole_by_earlier_versions_still_open(tmp_path: Path) -> None:
    keys.activate(tmp_path)
    try:
        item = ExtractedMemory(user_id="ann", memory="The user lives in Porto. " * 20)
        binary = legacy.seal_value("ann", codec.deflate(item.model_dump_json().encode()))
        assert binary.startswith(legacy.MAGIC) and MEMORY_ITEMS.decode(binary) == item
        tampered = binary[:-1] + bytes([binary[-1] ^ 1])
        with pytest.raises(ValidationError, match="no longer exists"):
            MEMORY_ITEMS.decode(tampered)
        old = sealing.seal("ann", item.model_dump_json().encode())  # the first envelope
        assert old.startswith(legacy.PREFIX) and MEMORY_ITEMS.decode(old) == item
        assert keys.destroy("ann")
        with pytest.raises(ValidationError, match="cube 'ann' was erased"):
            MEMORY_ITEMS.decode(binary)
    finally:
        keys.release(tmp_path)


def test_compact_topics_leave_defaults_out_and_keep_the_version() -> None:
    update = MemoryUpdate(user_id="ann", action="added", stage="add", node_id="n1",
                          node=node(), occurred_at=AT)
    raw = MEMORY_UPDATES.encode(update)
    opened = json.loads(codec.inflate(raw))
    assert opened["schema_version"] == MEMORY_UPDATE_VERSION
    assert "frozen" not in opened["node"]["metadata"]  # a default, left out
    assert opened["node"]["metadata"]["sources"] == [{"message_id": "m1"}]
    assert MEMORY_UPDATES.decode(raw) == update
    # a discriminated union needs its tag even at the default: those topics stay whole
    assert not REQUESTS.compact
    for spec in ALL_TOPICS:
        if spec.compact:
            assert "Annotated" not in repr(spec.value), spec.suffix


def test_memory_updates_v2_carry_no_usage_and_v1_records_still_decode() -> None:
    used = node(usage=3)
    update = MemoryUpdate(user_id="ann", action="updated", stage="commands", node_id="n1",
                          node=used, occurred_at=AT)
    assert update.node is not None and update.node.metadata.usage == ()
    assert update.schema_version == MEMORY_UPDATE_VERSION
    v1 = json.loads(update.model_dump_json())
    v1["schema_version"] = 1
    v1["node"] = json.loads(used.model_dump_json())  # written with its usage, as before
    old = MEMORY_UPDATES.decode(json.dumps(v1).encode())
    assert isinstance(old, MemoryUpdate) and old.schema_version == 1
    assert old.node is not None and old.node.memory == used.memory
    assert old.node.metadata.usage == ()


def test_nesting_is_checked_on_the_opened_value_of_a_sealed_record(tmp_path: Path) -> None:
    keys.activate(tmp_path)
    try:
        deep = ('{"user_id":"ann","messages":' + "[" * 50 + "]" * 50 + "}").encode()
        raw = RawRecord("t", 0, 0, b"ann", legacy.seal_value("ann", codec.deflate(deep)))
        with pytest.raises(LimitExceeded, match="JSON nesting"):
            decode(CONVERSATIONS, raw, LimitsSettings())
        chunk = ConversationChunk(user_id="ann", messages=(  # type: ignore[arg-type]
            {"id": "m1", "role": "user", "content": "hi", "timestamp": AT.isoformat()},))
        ok = RawRecord("t", 0, 0, b"ann", CONVERSATIONS.encode(chunk))
        assert decode(CONVERSATIONS, ok, LimitsSettings()) == chunk
    finally:
        keys.release(tmp_path)


def test_an_old_plain_record_reads_as_it_did() -> None:
    chunk = ConversationChunk(user_id="ann", messages=(  # type: ignore[arg-type]
        {"id": "m1", "role": "user", "content": "hi", "timestamp": AT.isoformat()},))
    assert CONVERSATIONS.decode(chunk.model_dump_json().encode()) == chunk
