"""Size limits without services: the depth scan, the content checks, the dead-letter cut."""

from __future__ import annotations

import base64
import json
import random
import time

import pytest

from memstream.streams.runtime.stage import RawRecord, dead_letter, decode_batch
from memstream.topics.events import ConversationChunk, ExtractedMemory, SearchRequest
from memstream.topics.limits import LimitExceeded, check_content, check_raw, json_depth
from memstream.topics.models import utcnow
from memstream.topics.registry import CONVERSATIONS, DEAD_LETTER
from memstream.topics.settings import LimitsSettings

LIMITS = LimitsSettings()


def test_depth_scan_ignores_brackets_in_strings_and_never_recurses() -> None:
    assert json_depth(b'{"a": [1, {"b": "[[[[{{{{\\"]]]"}]}') == 3
    assert json_depth(b'"just a string"') == 0
    deep = b"[" * 100_000 + b"]" * 100_000
    started = time.perf_counter()
    assert json_depth(deep) == 100_000
    assert time.perf_counter() - started < 1.0
    with pytest.raises(LimitExceeded, match="100,000 levels; the limit is 32 "
                                            r"\(MEMSTREAM_LIMITS__JSON_DEPTH\)"):
        check_raw(deep, LIMITS)


def test_content_limits_name_the_field_and_the_setting() -> None:
    chunk = ConversationChunk(user_id="u", messages=tuple(
        {"id": f"m{i}", "role": "user", "content": "x" * (40_000 if i == 3 else 5),
         "timestamp": utcnow()} for i in range(4)))  # type: ignore[misc]
    with pytest.raises(LimitExceeded, match=r"message 3 content is 40,000 characters; the "
                                            r"limit is 32,000 \(MEMSTREAM_LIMITS__MESSAGE_CHARS\)"):
        check_content(chunk, LIMITS)
    with pytest.raises(LimitExceeded, match="MEMSTREAM_LIMITS__MEMORY_CHARS"):
        check_content(ExtractedMemory(user_id="u", memory="y" * 8_001), LIMITS)
    check_content(ExtractedMemory(user_id="u", memory="y" * 20_000,
                                  memory_type="EpisodicMemory"), LIMITS)  # bounded by its chunk
    with pytest.raises(LimitExceeded, match="MEMSTREAM_LIMITS__QUERY_CHARS"):
        check_content(SearchRequest(user_id="u", query="q" * 2_001), LIMITS)


def test_an_oversized_event_is_dead_lettered_at_once_with_a_letter_that_fits() -> None:
    payload = json.dumps({"user_id": "u", "kind": "doc", "document": {
        "doc_id": "d", "text": 'say "hi" ' * 120_000}}).encode()
    raw = RawRecord("t.conversations", 0, 7, b"u", payload)
    good, dead = decode_batch("extraction", CONVERSATIONS, [raw], utcnow, LIMITS)
    assert not good and len(dead) == 1
    letter = dead[0].event
    assert "MEMSTREAM_LIMITS__EVENT_BYTES" in letter.error  # type: ignore[attr-defined]
    assert "payload cut" in letter.error  # type: ignore[attr-defined]
    assert len(DEAD_LETTER.encode(letter)) < LIMITS.event_bytes


def test_dead_letter_keeps_a_small_payload_whole() -> None:
    raw = RawRecord("t", 0, 0, None, b"not json")
    letter = dead_letter("s", raw, ValueError("bad"), 1, utcnow).event
    assert letter.payload == "not json" and letter.error == "bad"  # type: ignore[attr-defined]


def test_a_reply_over_the_byte_limit_becomes_an_error_naming_it() -> None:
    from memstream.streams.search.logic import _bounded
    from memstream.topics.events import Reply, ScoredMemory, SearchResult
    from memstream.topics.models import MemoryItem, MemoryMetadata

    # texts that do not compress (replies are compressed before they are measured)
    rng = random.Random(1)
    items = [MemoryItem(id=f"n{i}", memory=base64.b64encode(rng.randbytes(2_250)).decode(),
                        metadata=MemoryMetadata(user_id="u", cube_id="u",
                                                memory_type="LongTermMemory"))  # type: ignore[call-arg]
             for i in range(3)]
    result = SearchResult(memories=tuple(ScoredMemory(item=item, score=1.0) for item in items))
    reply = Reply(user_id="u", correlation_id="c", ok=True, result=result)  # type: ignore[call-arg]
    small = LimitsSettings(event_bytes=5_000)
    bounded = _bounded(reply, small)
    assert not bounded.ok and bounded.result is None and bounded.error is not None
    assert "the limit is 5,000 (MEMSTREAM_LIMITS__EVENT_BYTES)" in bounded.error.message
    assert _bounded(reply, LIMITS) is reply


async def test_the_local_embedder_reads_a_long_text_in_bounded_time() -> None:
    from memstream.streams.embed.local import LocalEmbedder

    text = "The user walked to the market and bought apples and pears. " * 3_400  # 200 KB
    started = time.perf_counter()
    vectors = await LocalEmbedder(max_chars=LIMITS.embed_chars).embed_passages([text])
    elapsed = time.perf_counter() - started
    print(f"\n200 KB text embedded in {elapsed:.2f}s (cut to {LIMITS.embed_chars:,} chars)")
    assert vectors.shape == (1, 384) and elapsed < 30
