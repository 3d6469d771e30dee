"""The Python client that speaks the topic contract.

``async with MemoryClient(settings) as client`` publishes conversations, documents
and memories (each write returns a ``WriteToken``), follows ``memory.updates``,
and waits until a write has been applied by the workers (read-your-writes).

``MemoryClient`` is put together from one class per concern: ``core`` (state, start and
close, ``publish``), ``writes``, ``transport`` (requests and replies), ``queries`` (the
calls a worker answers) and ``log_reads`` (the topics read directly); the provenance reads
live here with the readers they keep, as they take the whole client.
"""

from __future__ import annotations

from datetime import UTC, datetime
from types import TracebackType
from typing import Literal

from memstream.client.errors import ClientError, MemoryServiceError
from memstream.client.log_reads import LogReads
from memstream.client.queries import QueryCalls
from memstream.client.writes import WriteCalls
from memstream.history import indexed as provenance_read
from memstream.history.provenance import Change, Explanation
from memstream.topics.limits import LimitExceeded
from memstream.topics.models import MemoryItem
from memstream.topics.settings import Settings

__all__ = ["ClientError", "LimitExceeded", "MemoryClient", "MemoryServiceError"]


class MemoryClient(WriteCalls, QueryCalls, LogReads):
    """Async client for memstream's topics. Start it with ``async with`` or ``start()``."""

    def __init__(self, settings: Settings | None = None, bootstrap: str | None = None) -> None:
        super().__init__(settings, bootstrap)
        self.provenance_readers: provenance_read.Readers | None = None  # history, explain

    async def close(self) -> None:
        """Closes what ``ClientCore`` opened, then the provenance readers."""
        await super().close()
        readers, self.provenance_readers = self.provenance_readers, None
        if readers is not None:
            await readers.close()

    async def __aenter__(self) -> MemoryClient:
        await self.start()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # ------------------------------------------------------------------ provenance (the log)

    async def memory_history(self, node_id: str, cube_id: str | None = None) -> list[Change]:
        """Every change of a memory, oldest first, each with the event that caused it.
        (``history`` reads a topic; this reads one memory's story.)"""
        try:
            return await provenance_read.memory_history(self, node_id, cube_id)
        except provenance_read.NoWorker as exc:
            raise ClientError(str(exc)) from exc

    async def as_of(self, cube_id: str, at: datetime, *,
                    time: Literal["recorded", "valid"] = "recorded") -> list[MemoryItem]:
        """What the cube held at ``at`` (working-memory copies aside), rebuilt from
        ``memory.updates``. ``time="valid"``: ``at`` is in the conversation's time — the
        memories that held then (``MemoryMetadata.valid_at``: begun, not yet closed by a
        later statement or by feedback), as the cube knows them now."""
        try:
            if time == "recorded":
                return await provenance_read.cube_as_of(self, cube_id, at)
            now = await provenance_read.cube_as_of(self, cube_id, datetime.now(UTC))
        except provenance_read.NoWorker as exc:
            raise ClientError(str(exc)) from exc
        return [n for n in now if n.metadata.status == "activated" and n.metadata.valid_at(at)]

    async def explain(self, node_id: str, cube_id: str | None = None) -> Explanation:
        """Why the cube holds a memory: its source messages (text from the log) and the
        merges and inferences that led to it."""
        try:
            return await provenance_read.explain(self, node_id, cube_id)
        except provenance_read.NoWorker as exc:
            raise ClientError(str(exc)) from exc
