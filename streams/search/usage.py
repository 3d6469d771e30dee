"""Usage of returned memories, written to the graph in batches after the replies.

Every search that returns a node appends a record to the node's usage history (lifecycle
reads it: what nobody uses is archived). One graph write per search cost a fifth of a
search's work on the worker's event loop, and each write held the graph while the next
search read it. Now the uses of ``search.usage_flush_s`` are written together: per cube one
write, each node's new records appended oldest first (``GraphStore.record_usage``). A use
is timed when its search is answered, not when it is written; a worker that stops writes
what it holds first; a write that fails after the store's retries is logged with the
number of nodes whose use was not kept.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Sequence
from typing import Any

from memstream.streams.runtime.stage import Deps
from memstream.topics.events import RequestBase
from memstream.topics.models import MemoryItem, UsageRecord

log = logging.getLogger("memstream.search")


class UsageWriter:
    """Collects what searches returned and writes it per cube, every ``flush_s``."""

    def __init__(self, deps: Deps) -> None:
        self.deps = deps
        self._uses: dict[str, dict[str, list[UsageRecord]]] = {}  # cube -> node -> records
        self._seen: dict[str, dict[str, MemoryItem]] = {}  # cube -> node as last returned
        self._task: asyncio.Task[None] | None = None
        self._writing: set[asyncio.Task[None]] = set()

    def add(self, request: RequestBase, items: Sequence[MemoryItem]) -> None:
        """Record that ``request`` returned ``items`` (written within ``usage_flush_s``)."""
        if not items:
            return
        record = UsageRecord(at=self.deps.clock(), requester=request.requester,
                             query=getattr(request, "query", None))
        keep = self.deps.settings.search.usage_history
        uses = self._uses.setdefault(request.cube_id, {})
        seen = self._seen.setdefault(request.cube_id, {})
        for item in items:
            records = uses.setdefault(item.id, [])
            records.append(record)
            del records[:-keep]  # only the newest ``keep`` are ever kept
            seen[item.id] = item
        if self.deps.settings.search.usage_flush_s <= 0:
            self._spawn(self.flush())
        elif self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="memstream-usage")

    async def _run(self) -> None:
        while self._uses:
            await asyncio.sleep(self.deps.settings.search.usage_flush_s)
            self._spawn(self.flush())  # its own task: stopping this loop never cuts a write

    async def flush(self) -> None:
        """Write every use held now, one write per cube (cubes concurrently)."""
        uses, self._uses = self._uses, {}
        seen, self._seen = self._seen, {}
        await asyncio.gather(*(self._write(cube, nodes, list(seen.get(cube, {}).values()))
                               for cube, nodes in uses.items()))

    async def _write(self, cube_id: str, uses: dict[str, list[UsageRecord]],
                     seen: list[MemoryItem]) -> None:
        try:
            await self.deps.store.record_usage(cube_id, uses, self.deps.settings.search
                                               .usage_history, seen=seen)
        except Exception as exc:  # noqa: BLE001 - reported; the searches were answered
            log.warning("usage of %d nodes in %s was not recorded: %s", len(uses), cube_id,
                        exc)

    def _spawn(self, write: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(write)
        self._writing.add(task)
        task.add_done_callback(self._writing.discard)

    async def close(self) -> None:
        """Write what is held (a stopping worker keeps the uses it answered)."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if self._writing:
            await asyncio.gather(*self._writing, return_exceptions=True)
        await self.flush()
