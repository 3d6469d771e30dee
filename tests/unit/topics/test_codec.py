"""Values deflated by hand (topics/codec.py): they round-trip, a compression bomb or a damaged
value is refused, the primed dictionary pays on small events, and the first form still opens."""

from __future__ import annotations

import json
import zlib
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from memstream.topics import codec
from memstream.topics.events import MemoryUpdate
from memstream.topics.registry import CONVERSATIONS, MEMORY_UPDATES

AT = datetime(2026, 3, 1, 9, tzinfo=UTC)


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
