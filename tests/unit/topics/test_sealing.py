"""Sealing with per-cube data keys (topics/sealing.py): what a person said is sealed field by
field while the rest of the event stays readable JSON, and nothing opens once the cube's key
is gone."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import ValidationError

from memstream.security import keys
from memstream.topics import sealing
from memstream.topics.events import ConversationChunk, ExtractedMemory, MemoryUpdate
from memstream.topics.models import MemoryItem
from memstream.topics.registry import CONVERSATIONS, MEMORY_ITEMS, MEMORY_UPDATES


def chunk(cube: str, text: str) -> ConversationChunk:
    return ConversationChunk(user_id=cube, messages=({"id": "m1", "role": "user",
                                                       "content": text,
                                                       "timestamp": "2026-01-01T00:00:00Z"},))  # type: ignore[arg-type]


def test_values_are_sealed_per_cube_and_unreadable_once_the_key_is_destroyed(
    tmp_path: Path,
) -> None:
    keys.activate(tmp_path)
    try:
        raw = CONVERSATIONS.encode(chunk("ann", "my PIN is 4321"))
        other = CONVERSATIONS.encode(chunk("ben", "my PIN is 9876"))
        assert sealing.is_sealed(raw) and b"4321" not in raw
        assert CONVERSATIONS.decode(raw).messages[0].content == "my PIN is 4321"  # type: ignore[attr-defined]
        assert keys.destroy("ann") and not keys.destroy("ann")
        with pytest.raises(ValidationError, match="cube 'ann' was erased"):
            CONVERSATIONS.decode(raw)
        assert CONVERSATIONS.decode(other).cube_id == "ben"  # other cubes unaffected
        # the cube used again gets a new key; its old records stay unreadable
        assert CONVERSATIONS.decode(CONVERSATIONS.encode(chunk("ann", "new"))).cube_id == "ann"
        with pytest.raises(ValidationError, match="no longer exists"):
            CONVERSATIONS.decode(raw)
    finally:
        keys.release(tmp_path)
    # released: values are written as plain JSON again, and plain JSON is always read
    plain = CONVERSATIONS.encode(chunk("cat", "hello"))
    assert not sealing.is_sealed(plain) and CONVERSATIONS.decode(plain).cube_id == "cat"


AT = datetime(2026, 3, 1, 9, tzinfo=UTC)


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


def test_a_models_json_schema_admits_the_reference_where_a_field_is_sealed() -> None:
    """Any JSON Schema generator reads the models (no reference it cannot resolve)."""
    memory = MemoryItem.model_json_schema()["properties"]["memory"]
    assert memory["x-sealed"] is True
    assert {"type": "string", "minLength": 1} in [
        {k: v for k, v in option.items() if k != "title"} for option in memory["anyOf"]]
    assert sealing.FIELD_REF_SCHEMA in memory["anyOf"]
