"""The topic registry (topics/registry.py): every topic once, prefixed names, values that
round-trip, compact topics, and old plain records that still read."""

from __future__ import annotations

import json

from memstream.topics import codec
from memstream.topics.events import MEMORY_UPDATE_VERSION, ConversationChunk, MemoryUpdate, Reply
from memstream.topics.registry import ALL_TOPICS, BY_SUFFIX, CONVERSATIONS, MEMORY_UPDATES, REQUESTS
from memstream.topics.settings import Settings
from tests.support.events import AT, chat, node

SPEC_TOPICS = {
    "conversations", "memory.items", "memory.commands", "memory.updates", "reorganize.high",
    "reorganize.normal", "reorganize.low", "schedule.query", "schedule.answer", "schedule.add",
    "working-memory", "activation-memory", "requests", "replies", "dead-letter",
    "cube-views",  # beyond the original topic list: promote (streams/runtime/views.py)
}


def test_registry_covers_every_spec_topic_once() -> None:
    assert {t.suffix for t in ALL_TOPICS} == SPEC_TOPICS
    assert len(ALL_TOPICS) == len(SPEC_TOPICS)


def test_topic_names_carry_the_configured_prefix() -> None:
    settings = Settings(kafka={"topic_prefix": "acme."})
    assert CONVERSATIONS.name(settings) == "acme.conversations"


def test_round_trip_through_json_is_lossless() -> None:
    chunk = ConversationChunk.model_validate(chat())
    assert CONVERSATIONS.decode(CONVERSATIONS.encode(chunk)) == chunk
    update = MemoryUpdate(user_id="u", action="added", stage="t", node_id="n1")
    assert BY_SUFFIX["memory.updates"].decode(BY_SUFFIX["memory.updates"].encode(update)) == update
    reply = Reply(user_id="u", correlation_id="c", ok=False,
                  error={"type": "ValidationError", "message": "bad"})
    assert BY_SUFFIX["replies"].decode(reply.model_dump_json()) == reply


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


def test_an_old_plain_record_reads_as_it_did() -> None:
    chunk = ConversationChunk(user_id="ann", messages=(  # type: ignore[arg-type]
        {"id": "m1", "role": "user", "content": "hi", "timestamp": AT.isoformat()},))
    assert CONVERSATIONS.decode(chunk.model_dump_json().encode()) == chunk
