"""The topic contract: what producers and consumers can rely on."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from pydantic import ValidationError

from memstream.topics.events import ConversationChunk, MemoryUpdate, Reply, SearchRequest
from memstream.topics.ids import chunk_source_key, memory_id, working_copy_id
from memstream.topics.registry import ALL_TOPICS, BY_SUFFIX, CONVERSATIONS, REQUESTS
from memstream.topics.settings import Settings

SPEC_TOPICS = {
    "conversations", "memory.items", "memory.commands", "memory.updates", "reorganize.high",
    "reorganize.normal", "reorganize.low", "schedule.query", "schedule.answer", "schedule.add",
    "working-memory", "activation-memory", "requests", "replies", "dead-letter",
    "cube-views",  # beyond the original topic list: promote (streams/runtime/views.py)
}


def chat(**overrides: object) -> dict[str, object]:
    base: dict[str, object] = {
        "user_id": "u1",
        "messages": [{"id": "m1", "role": "user", "content": "I like tea",
                      "timestamp": "2026-03-01T09:00:00+01:00"}],
    }
    return {**base, **overrides}


def test_registry_covers_every_spec_topic_once() -> None:
    assert {t.suffix for t in ALL_TOPICS} == SPEC_TOPICS
    assert len(ALL_TOPICS) == len(SPEC_TOPICS)


def test_topic_names_carry_the_configured_prefix() -> None:
    settings = Settings(kafka={"topic_prefix": "acme."})
    assert CONVERSATIONS.name(settings) == "acme.conversations"


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


def test_round_trip_through_json_is_lossless() -> None:
    chunk = ConversationChunk.model_validate(chat())
    assert CONVERSATIONS.decode(CONVERSATIONS.encode(chunk)) == chunk
    update = MemoryUpdate(user_id="u", action="added", stage="t", node_id="n1")
    assert BY_SUFFIX["memory.updates"].decode(BY_SUFFIX["memory.updates"].encode(update)) == update
    reply = Reply(user_id="u", correlation_id="c", ok=False,
                  error={"type": "ValidationError", "message": "bad"})
    assert BY_SUFFIX["replies"].decode(reply.model_dump_json()) == reply


def test_ids_are_deterministic_and_distinct() -> None:
    a = memory_id("cube", "msgs:m1,m2", 0)
    assert a == memory_id("cube", "msgs:m1,m2", 0)
    assert len({a, memory_id("cube", "msgs:m1,m2", 1), memory_id("other", "msgs:m1,m2", 0),
                memory_id("cube", "msgs:m1", 0)}) == 4
    assert working_copy_id(a) != a and working_copy_id(a) == working_copy_id(a)


def test_settings_pick_providers_from_what_is_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().llm.provider == "rules"
    assert Settings().embedder.provider == "local"
    monkeypatch.setenv("MEMSTREAM_LLM__BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("MEMSTREAM_LLM__API_KEY", "sk-secret")
    monkeypatch.setenv("MEMSTREAM_KAFKA__PARTITIONS", "3")
    s = Settings()
    assert s.llm.provider == "openai"
    assert s.kafka.partitions == 3
    assert "sk-secret" not in repr(s)
    assert s.llm.api_key is not None and s.llm.api_key.get_secret_value() == "sk-secret"


def test_null_in_the_environment_unsets_an_optional_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert Settings().worker.blas_threads == 1
    monkeypatch.setenv("MEMSTREAM_WORKER__BLAS_THREADS", "null")
    assert Settings().worker.blas_threads is None
    monkeypatch.setenv("MEMSTREAM_WORKER__BLAS_THREADS", "0")
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        Settings()


def test_chunk_keys_follow_what_was_said_not_only_the_message_ids() -> None:
    said = [("m0", "user", "I no longer eat meat.")]
    assert chunk_source_key("s1", said) == chunk_source_key("s1", list(said))  # redelivery
    # a per-session counter reused for something else said is another chunk
    assert chunk_source_key("s1", said) != chunk_source_key("s1", [("m0", "user", "I run.")])
    assert chunk_source_key("s1", said) != chunk_source_key("s2", said)
