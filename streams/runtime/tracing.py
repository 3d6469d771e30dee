"""Spans of the stages (``tracing``): one per cube batch a stage handles.

A stage's span is a child of the trace context its first record carries (the others'
are links), and the outputs it returns carry its own context, so the next stage's span
is its child: one trace runs from a client's call through every stage it reaches.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

from memstream.kafka import tracing

# (records, raw records and outputs of ``streams.runtime``, which imports this module)
Out = TypeVar("Out")


@contextlib.contextmanager
def stage_span(stage: str, records: Sequence[Any]) -> Iterator[Any]:
    """The span of one cube's batch in ``stage`` (``memstream.<stage>``)."""
    if not tracing.enabled():
        yield tracing.OFF
        return
    first = records[0]
    with tracing.consumed(f"memstream.{stage}", [r.raw.headers for r in records], {
            "memstream.stage": stage,
            "memstream.cube_id": getattr(first.value, "cube_id", None),
            "memstream.event_type": type(first.value).__name__,
            "messaging.system": "kafka",
            "messaging.destination.name": first.raw.topic,
            "messaging.kafka.partition": first.raw.partition,
            "messaging.kafka.offset": first.raw.offset,
            "messaging.batch.message_count": len(records)}) as span:
        yield span


def request_span(raw: Any) -> contextlib.AbstractContextManager[Any]:
    """The span of one request served by a request lane."""
    return tracing.consumed("memstream.search.request", [raw.headers], {
        "messaging.system": "kafka", "messaging.destination.name": raw.topic,
        "messaging.kafka.partition": raw.partition, "messaging.kafka.offset": raw.offset})


def stamp(outgoing: list[Out]) -> list[Out]:
    """Outputs carrying the current span's context (those carrying one already keep it)."""
    trace = tracing.inject()
    if not trace:
        return outgoing
    return [o if getattr(o, "headers", None) else
            dataclasses.replace(o, headers=tuple(trace))  # type: ignore[type-var]
            for o in outgoing]
