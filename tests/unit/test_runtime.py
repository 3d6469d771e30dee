"""Decoding, retries and dead letters: one bad event never stops the rest."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any

from memstream.streams.runtime.stage import (
    Outgoing,
    RawRecord,
    Record,
    StageStats,
    make_batch_handler,
)
from memstream.topics.events import DeadLetter, ExtractedMemory, MemoryUpdate
from memstream.topics.models import utcnow
from memstream.topics.registry import DEAD_LETTER, MEMORY_ITEMS, MEMORY_UPDATES
from memstream.topics.settings import WorkerSettings

FAST = WorkerSettings(stage_retries=2, retry_backoff_s=0.0)


def raw(offset: int, value: bytes, key: bytes = b"c1") -> RawRecord:
    return RawRecord("p.memory.items", 0, offset, key, value)


def item(text: str, cube: str = "c1") -> bytes:
    return ExtractedMemory(user_id="u", cube_id=cube, memory=text).model_dump_json().encode()


def echo_logic(calls: list[list[str]], poison: str | None = None):  # type: ignore[no-untyped-def]
    async def logic(records: Sequence[Record[Any]]) -> list[Outgoing]:
        texts = [r.value.memory for r in records]
        calls.append(texts)
        if poison in texts:
            raise RuntimeError(f"cannot handle {poison!r}")
        return [Outgoing(MEMORY_UPDATES, MemoryUpdate(user_id="u", cube_id=r.value.cube_id,
                                                      action="added", stage="t",
                                                      node_id=r.value.memory))
                for r in records]
    return logic


def letters(out: list[Outgoing]) -> list[DeadLetter]:
    return [o.event for o in out if o.spec is DEAD_LETTER]  # type: ignore[misc]


async def test_bad_json_and_schema_violations_become_dead_letters_and_the_rest_passes() -> None:
    calls: list[list[str]] = []
    stats = StageStats()
    handle = make_batch_handler("memory.add", MEMORY_ITEMS, echo_logic(calls), FAST, utcnow, stats)
    out = await handle([
        raw(0, b"{not json"),
        raw(1, json.dumps({"user_id": "u", "memory": ""}).encode()),
        raw(2, item("good one")),
        raw(3, b"\xff\xfe binary"),
    ])
    dead = letters(out)
    assert [d.original_offset for d in dead] == [0, 1, 3]
    assert "Invalid JSON" in dead[0].error and dead[0].payload == "{not json"
    assert "memory" in dead[1].error and "at least 1 character" in dead[1].error
    assert dead[2].payload_encoding == "base64"
    assert base64.b64decode(dead[2].payload) == b"\xff\xfe binary"
    assert all(d.stage == "memory.add" and d.original_key == "c1" for d in dead)
    assert [o.event.node_id for o in out if o.spec is MEMORY_UPDATES] == ["good one"]  # type: ignore[attr-defined]
    assert stats.dead_lettered == 3


async def test_a_poison_event_is_retried_then_isolated() -> None:
    calls: list[list[str]] = []
    stats = StageStats()
    handle = make_batch_handler("memory.add", MEMORY_ITEMS, echo_logic(calls, poison="bad"),
                                FAST, utcnow, stats)
    out = await handle([raw(0, item("a")), raw(1, item("bad")), raw(2, item("b"))])
    done = [o.event.node_id for o in out if o.spec is MEMORY_UPDATES]  # type: ignore[attr-defined]
    assert done == ["a", "b"]
    (letter,) = letters(out)
    assert letter.original_offset == 1 and letter.attempts == 3
    assert "cannot handle 'bad'" in letter.error and letter.error_type == "RuntimeError"
    assert json.loads(letter.payload)["memory"] == "bad"  # the original bytes, untouched
    # whole batch tried 3 times, then each record on its own (bad one 3 times)
    assert calls[:3] == [["a", "bad", "b"]] * 3
    assert calls[3:] == [["a"], ["bad"], ["bad"], ["bad"], ["b"]]


async def test_cubes_are_processed_separately_and_in_log_order() -> None:
    calls: list[list[str]] = []
    handle = make_batch_handler("memory.add", MEMORY_ITEMS, echo_logic(calls), FAST, utcnow,
                                StageStats())
    await handle([raw(0, item("a1", "A")), raw(1, item("b1", "B")), raw(2, item("a2", "A"))])
    assert sorted(calls) == [["a1", "a2"], ["b1"]]
