"""Per-cube data keys (topics/sealing.py): what is sealed can be read until the key is gone."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from memstream.security import keys
from memstream.topics import sealing
from memstream.topics.events import ConversationChunk
from memstream.topics.registry import CONVERSATIONS


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


def test_the_first_key_made_for_a_cube_wins(tmp_path: Path) -> None:
    ring = keys.Keyring(tmp_path)
    first = ring.create("dan")
    assert ring.create("dan") == first == ring.get("dan")
    assert len(list(tmp_path.iterdir())) == 1  # no temporary files left behind
