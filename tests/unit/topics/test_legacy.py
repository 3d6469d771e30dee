"""The value formats of earlier versions (topics/legacy.py): values sealed whole in binary
and the first JSON envelope still open, and no longer once the cube's key is gone."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from memstream.security import keys
from memstream.topics import codec, legacy, sealing
from memstream.topics.events import ExtractedMemory
from memstream.topics.registry import MEMORY_ITEMS


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
