"""Every record says what it is in its headers (CloudEvents' Kafka binding), with an id that a
redelivery repeats, so a subscriber in any language can route, validate and drop repeats."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from memstream.kafka.headers import headers_for, headers_for_payload
from memstream.topics.events import ExtractedMemory, MemoryUpdate
from memstream.topics.ids import derived_event_id
from memstream.topics.registry import MEMORY_UPDATES

AT = datetime(2026, 3, 1, 9, tzinfo=UTC)


def test_a_record_names_its_content_type_schema_and_event_id() -> None:
    update = MemoryUpdate(user_id="ann", action="added", stage="memory.add", node_id="n1",
                          memory_type="UserMemory", occurred_at=AT, event_id="e1")
    headers = dict(headers_for(update, MEMORY_UPDATES.encode(update), None))
    assert headers["content-type"] == b"application/json"
    assert headers["ce_specversion"] == b"1.0"
    assert headers["ce_id"] == b"e1"
    assert headers["ce_type"] == f"memstream.MemoryUpdate.v{update.schema_version}".encode()
    assert headers["ce_source"] == b"memstream"


def test_an_event_sent_again_carries_the_same_id() -> None:
    """A stage's output id is derived from its input: the repeat after a crash is the same."""
    def output() -> MemoryUpdate:
        return MemoryUpdate(user_id="ann", action="added", stage="memory.add", node_id="n1",
                            event_id=derived_event_id("memory.add", "cause-1", "n1"))
    first, again = (dict(headers_for(e, b"", None)) for e in (output(), output()))
    assert first["ce_id"] == again["ce_id"]


def test_a_payload_republished_as_it_is_keeps_its_own_id() -> None:
    item = ExtractedMemory(user_id="ann", memory="m", event_id="orig")
    raw = json.dumps({"user_id": "ann", "cube_id": "ann", "event_id": "orig"}).encode()
    headers = dict(headers_for_payload(raw, None, item))
    assert headers["ce_id"] == b"orig" and "ce_type" not in headers
