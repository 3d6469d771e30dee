"""Stage plumbing (streams/runtime/stage.py): decoding, retries and dead letters (one bad
event never stops the rest), and outages that pause a stage instead."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiokafka.errors import KafkaConnectionError

from memstream.security import keys
from memstream.sinks.ports import StoreError, StoreUnavailable
from memstream.streams.runtime.stage import (
    Outgoing,
    PermanentError,
    RawRecord,
    Record,
    StageStats,
    dead_letter,
    decode,
    decode_batch,
    is_outage,
    make_batch_handler,
    with_retries,
)
from memstream.topics import codec, legacy
from memstream.topics.events import ConversationChunk, DeadLetter, ExtractedMemory, MemoryUpdate
from memstream.topics.limits import LimitExceeded
from memstream.topics.models import utcnow
from memstream.topics.registry import CONVERSATIONS, DEAD_LETTER, MEMORY_ITEMS, MEMORY_UPDATES
from memstream.topics.settings import LimitsSettings, WorkerSettings

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


LIMITS = LimitsSettings()


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


AT = datetime(2026, 3, 1, 9, tzinfo=UTC)


def test_nesting_is_checked_on_the_opened_value_of_a_sealed_record(tmp_path: Path) -> None:
    keys.activate(tmp_path)
    try:
        deep = ('{"user_id":"ann","messages":' + "[" * 50 + "]" * 50 + "}").encode()
        raw = RawRecord("t", 0, 0, b"ann", legacy.seal_value("ann", codec.deflate(deep)))
        with pytest.raises(LimitExceeded, match="JSON nesting"):
            decode(CONVERSATIONS, raw, LimitsSettings())
        chunk = ConversationChunk(user_id="ann", messages=(  # type: ignore[arg-type]
            {"id": "m1", "role": "user", "content": "hi", "timestamp": AT.isoformat()},))
        ok = RawRecord("t", 0, 0, b"ann", CONVERSATIONS.encode(chunk))
        assert decode(CONVERSATIONS, ok, LimitsSettings()) == chunk
    finally:
        keys.release(tmp_path)


def _wrapped(cause: BaseException) -> StoreError:
    try:
        try:
            raise cause
        except Exception as exc:
            raise StoreError(f"graph write failed after 4 attempts: {exc}") from exc
    except StoreError as outer:
        return outer


@pytest.mark.parametrize("error", [
    StoreUnavailable("FalkorDB at redis://127.0.0.1:1 unreachable"),
    ConnectionRefusedError(111, "refused"),
    KafkaConnectionError("closed"),
    _wrapped(StoreUnavailable("down")),  # what MemoryStore raises after its own retries
])
def test_unreachable_dependencies_are_outages(error: BaseException) -> None:
    assert is_outage(error)


@pytest.mark.parametrize("error", [
    StoreError("unknown filter field 'x'"),
    ValueError("bad"),
    _wrapped(ValueError("dimension mismatch")),
    PermanentError("no such node"),
])
def test_wrong_events_are_not_outages(error: BaseException) -> None:
    assert not is_outage(error)


def test_a_cause_hidden_with_from_none_does_not_count() -> None:
    try:
        try:
            raise ConnectionResetError
        except ConnectionResetError:
            raise ValueError("rejected") from None
    except ValueError as exc:
        assert not is_outage(exc)


async def test_an_outage_pauses_without_using_up_the_retries() -> None:
    calls = 0

    async def flaky() -> list[Outgoing]:
        nonlocal calls
        calls += 1
        if calls <= 5:  # more failures than retries allow
            raise StoreUnavailable("FalkorDB unreachable")
        return []

    stats = StageStats()
    out, error, attempts = await with_retries("test", flaky, retries=1, backoff_s=0.001,
                                              stats=stats)
    assert (out, error, attempts) == ([], None, 1)
    assert stats.paused == 5 and stats.retries == 0


async def test_a_bad_event_still_fails_after_its_retries() -> None:
    async def bad() -> list[Outgoing]:
        raise StoreError("unknown filter field")

    _, error, attempts = await with_retries("test", bad, retries=2, backoff_s=0.001)
    assert isinstance(error, StoreError) and attempts == 3
