"""Events of the contract as its tests build them: a chat chunk's payload and a stored fact."""

from __future__ import annotations

from datetime import UTC, datetime

from memstream.topics.models import MemoryItem, MemoryMetadata, SourceRef, UsageRecord

AT = datetime(2026, 3, 1, 9, tzinfo=UTC)


def chat(**overrides: object) -> dict[str, object]:
    """The payload of a one-message ``ConversationChunk`` from user u1, with ``overrides``."""
    base: dict[str, object] = {
        "user_id": "u1",
        "messages": [{"id": "m1", "role": "user", "content": "I like tea",
                      "timestamp": "2026-03-01T09:00:00+01:00"}],
    }
    return {**base, **overrides}


def node(usage: int = 0) -> MemoryItem:
    """Ann's fact n1, with ``usage`` records of it being read."""
    return MemoryItem(id="n1", memory="The user lives in Porto and works as a nurse.",
                      metadata=MemoryMetadata(
                          user_id="ann", cube_id="ann", memory_type="LongTermMemory",
                          tags=("porto", "work"), sources=(SourceRef(message_id="m1"),),
                          created_at=AT, updated_at=AT,
                          usage=tuple(UsageRecord(at=AT, requester="r", query=f"q{i}")
                                      for i in range(usage))))
