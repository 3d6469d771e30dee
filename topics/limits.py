"""Size limits of the contract, checked the same way by the client and the worker.

The client refuses an oversized event before it reaches the producer; the worker checks
raw bytes and JSON nesting before parsing (events from other producers bypass the client)
and the content of each parsed event before any stage works on it. Every refusal is one
``LimitExceeded`` naming the field, its size, the limit and the setting that raises it.
"""

from __future__ import annotations

import re
from itertools import accumulate

from pydantic import BaseModel

from memstream.topics.events import (
    ConversationChunk,
    ExtractedMemory,
    Feedback,
    ScheduleMessage,
    SearchRequest,
    SubgraphRequest,
    UpdateNode,
)
from memstream.topics.settings import LimitsSettings


class LimitExceeded(ValueError):
    """An input is larger than a configured limit (``MEMSTREAM_LIMITS__…``)."""

    def __init__(self, what: str, size: int, limit: int, setting: str,
                 unit: str = "characters") -> None:
        env = f"MEMSTREAM_LIMITS__{setting.upper()}"
        super().__init__(f"{what} is {size:,} {unit}; the limit is {limit:,} ({env})")
        self.what, self.size, self.limit, self.setting = what, size, limit, setting


# A JSON string, escapes included (the unrolled form never backtracks per character).
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_DELTA = [0] * 256
_DELTA[ord("[")] = _DELTA[ord("{")] = 1
_DELTA[ord("]")] = _DELTA[ord("}")] = -1


def json_depth(raw: bytes) -> int:
    """The deepest bracket nesting of a JSON text, ignoring brackets inside strings.

    Iterative and linear (strings removed by one regex pass, then a running sum over the
    brackets alone), so a payload nested 100,000 deep costs milliseconds, not a
    ``RecursionError``. Malformed JSON gives some number; parsing reports the real error.
    """
    brackets = _STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    return max(accumulate(map(_DELTA.__getitem__, brackets)), default=0)


def check_raw(raw: bytes, limits: LimitsSettings, what: str = "event") -> None:
    """Size and nesting of a raw payload, before it is parsed."""
    if len(raw) > limits.event_bytes:
        raise LimitExceeded(f"{what} payload", len(raw), limits.event_bytes, "event_bytes",
                            "bytes")
    check_depth(raw, limits, what)


def check_depth(raw: bytes, limits: LimitsSettings, what: str = "event") -> None:
    depth = json_depth(raw)
    if depth > limits.json_depth:
        raise LimitExceeded(f"{what} JSON nesting", depth, limits.json_depth, "json_depth",
                            "levels")


def check_encoded(data: bytes, limits: LimitsSettings, what: str = "event") -> None:
    """An encoded event, before it is handed to a producer."""
    if len(data) > limits.event_bytes:
        raise LimitExceeded(f"encoded {what}", len(data), limits.event_bytes, "event_bytes",
                            "bytes")


def _chars(what: str, text: str | None, limit: int, setting: str) -> None:
    if text is not None and len(text) > limit:
        raise LimitExceeded(what, len(text), limit, setting)


def check_content(event: BaseModel, limits: LimitsSettings) -> None:
    """The content limits of one parsed event (texts, message counts, queries)."""
    match event:
        case ConversationChunk():
            if len(event.messages) > limits.chunk_messages:
                raise LimitExceeded("chat chunk", len(event.messages), limits.chunk_messages,
                                    "chunk_messages", "messages")
            for i, message in enumerate(event.messages):
                _chars(f"message {i} content", message.content, limits.message_chars,
                       "message_chars")
            if event.document is not None:
                _chars("document text", event.document.text, limits.document_chars,
                       "document_chars")
        case ExtractedMemory():
            if event.memory_type != "EpisodicMemory":  # an episode is its chunk, bounded above
                _chars(f"memory {event.index} text", event.memory, limits.memory_chars,
                       "memory_chars")
        case UpdateNode():
            _chars("memory text", event.memory, limits.memory_chars, "memory_chars")
        case Feedback():
            _chars("feedback note", event.note, limits.memory_chars, "memory_chars")
            _chars("feedback query", event.query, limits.query_chars, "query_chars")
        case SearchRequest() | SubgraphRequest():
            _chars("query", event.query, limits.query_chars, "query_chars")
            if isinstance(event, SearchRequest):
                if len(event.chat_history) > limits.chunk_messages:
                    raise LimitExceeded("chat history", len(event.chat_history),
                                        limits.chunk_messages, "chunk_messages", "turns")
                for i, turn in enumerate(event.chat_history):
                    _chars(f"chat history turn {i}", "".join(turn.values()),
                           limits.message_chars, "message_chars")
        case ScheduleMessage():
            _chars("schedule content", event.content, limits.message_chars, "message_chars")
        case _:
            return
