"""Size limits without services (topics/limits.py): the depth scan and the content checks."""

from __future__ import annotations

import time

import pytest

from memstream.topics.events import ConversationChunk, ExtractedMemory, SearchRequest
from memstream.topics.limits import LimitExceeded, check_content, check_raw, json_depth
from memstream.topics.models import utcnow
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
