"""The stage functions a replay drives, handed in by the worker (``streams.worker``) so the
replay folder imports no stage: it runs the same logic as the live pipeline without
depending on where that logic lives."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from memstream.streams.runtime.stage import Deps, Outgoing, Record
from memstream.topics.events import (
    ConversationChunk,
    Event,
    ExtractedMemory,
    Origin,
    ReorganizeEvent,
)


class InlineOptimizer(Protocol):
    """The optimizer's work done in line, keeping its windows as the live worker does."""

    async def apply(self, event: ReorganizeEvent, deps: Deps) -> None: ...


@dataclass(frozen=True)
class ReplayStages:
    """What the live stages do to one record, by kind of record."""

    add_memories: Callable[[Sequence[Record[ExtractedMemory]], Deps], Awaitable[list[Outgoing]]]
    extract_chunk: Callable[[ConversationChunk, Origin | None, Deps],
                            Awaitable[list[ExtractedMemory]]]
    run_command: Callable[[Event, Deps], Awaitable[list[Outgoing]]]
    apply_replacements: Callable[[Sequence[Record[Any]], Deps], Awaitable[list[Outgoing]]]
    optimizer: Callable[[], InlineOptimizer]  # a fresh one per replay
