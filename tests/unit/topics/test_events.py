"""The events of the contract (topics/events.py): what producers and consumers can rely on,
and older versions that still decode."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest
from pydantic import ValidationError

from memstream.topics.events import (
    MEMORY_UPDATE_VERSION,
    ConversationChunk,
    MemoryUpdate,
    SearchRequest,
)
from memstream.topics.registry import MEMORY_UPDATES, REQUESTS
from tests.support.events import AT, chat, node


def test_cube_defaults_to_user_and_times_are_utc() -> None:
    chunk = ConversationChunk.model_validate(chat())
    assert chunk.cube_id == "u1"
    assert chunk.kafka_key == b"u1"
    assert chunk.occurred_at.tzinfo is not None
    assert chunk.schema_version == 1
    shifted = ConversationChunk.model_validate(
        chat(occurred_at=datetime(2026, 1, 1, 12, tzinfo=timezone(timedelta(hours=8)))))
    assert shifted.occurred_at == datetime(2026, 1, 1, 4, tzinfo=UTC)
    assert shifted.occurred_at.utcoffset() == timedelta(0)


def test_events_are_frozen() -> None:
    chunk = ConversationChunk.model_validate(chat())
    with pytest.raises(ValidationError):
        chunk.user_id = "someone-else"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        (chat(user_id=""), "user_id"),
        (chat(messages=[]), "at least one message"),
        (chat(messages=[{"id": "m1", "role": "user", "content": "x",
                         "timestamp": "2026-03-01T09:00:00"}]), "timezone"),
        (chat(messages=[{"id": "m1", "role": "robot", "content": "x",
                         "timestamp": "2026-03-01T09:00:00Z"}]), "role"),
        (chat(kind="doc"), "needs a document"),
        (chat(unexpected=1), "unexpected"),
    ],
)
def test_bad_chunks_get_a_precise_error(payload: dict[str, object], fragment: str) -> None:
    with pytest.raises(ValidationError) as info:
        ConversationChunk.model_validate(payload)
    assert fragment in str(info.value)


def test_requests_are_a_discriminated_union() -> None:
    req = REQUESTS.decode(b'{"op":"search","user_id":"u","query":"tea","reply_to":"r1"}')
    assert isinstance(req, SearchRequest)
    assert req.reply_to == "r1" and req.top_k == 10
    with pytest.raises(ValidationError) as info:
        REQUESTS.decode(b'{"op":"search","user_id":"u"}')
    assert "query" in str(info.value)
    with pytest.raises(ValidationError) as info:
        REQUESTS.decode(b'{"op":"teleport","user_id":"u"}')
    assert "teleport" in str(info.value)


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
