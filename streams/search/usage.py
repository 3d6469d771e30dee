"""Usage of returned memories, written to the graph in batches after the replies.

Every search that returns a node appends a record to the node's usage history (lifecycle
reads it: what nobody uses is archived). One graph write per search cost a fifth of a
search's work on the worker's event loop, and each write held the graph while the next
search read it. Now the uses of ``search.usage_flush_s`` are written together: per cube one
write, each node's new records appended oldest first (``GraphStore.record_usage``). A use
is timed when its search is answered, not when it is written; a worker that stops writes
what it holds first; a write that fails after the store's retries is logged with the
number of nodes whose use was not kept. The cube's last search is noted too, at most once
every ``MARK_EVERY`` (a starting worker warms the cubes searched last: ``recent_cubes``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from memstream.sinks.lru import LRU
from memstream.streams.runtime.stage import Deps
from memstream.topics.events import RequestBase
from memstream.topics.models import MemoryItem, UsageRecord

log = logging.getLogger("memstream.search")
MARK_EVERY = timedelta(minutes=1)


@dataclass
class _Pending:
    """A cube's uses not written yet: node -> records, and each node as last returned."""

    uses: dict[str, list[UsageRecord]] = field(default_factory=dict)
    seen: dict[str, MemoryItem] = field(default_factory=dict)


class UsageWriter:
    """Collects what searches returned and writes it per cube, every ``flush_s``.

    It holds the uses of at most ``search.usage_cubes`` cubes: a use in one more cube has
    the least recently searched cube's uses written at once, so a burst of searches over
    many cubes holds no more, and loses nothing."""

    def __init__(self, deps: Deps) -> None:
        self.deps = deps
        self._pending: LRU[str, _Pending] = LRU(deps.settings.search.usage_cubes,
                                                on_evict=self._write_now)
        self._task: asyncio.Task[None] | None = None
        self._writing: set[asyncio.Task[None]] = set()
        self._marked: LRU[str, datetime] = LRU(deps.settings.search.usage_cubes)

    @property
    def pending_cubes(self) -> int:
        """Cubes whose uses are held, not written yet."""
        return len(self._pending)

    def add(self, request: RequestBase, items: Sequence[MemoryItem],
            cube_of: Mapping[str, str] | None = None) -> None:
        """Record that ``request`` returned ``items`` (written within ``usage_flush_s``), each
        in its cube: ``cube_of`` by id, else the request's."""
        if not items:
            return
        record = UsageRecord(at=self.deps.clock(), requester=request.requester,
                             query=getattr(request, "query", None))
        keep = self.deps.settings.search.usage_history
        for item in items:
            cube = (cube_of or {}).get(item.id, request.cube_id)
            pending = self._pending.setdefault(cube, _Pending)
            records = pending.uses.setdefault(item.id, [])
            records.append(record)
            del records[:-keep]  # only the newest ``keep`` are ever kept
            pending.seen[item.id] = item
        if self.deps.settings.search.usage_flush_s <= 0:
            self._spawn(self.flush())
        elif self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="memstream-usage")

    async def _run(self) -> None:
        while len(self._pending):
            await asyncio.sleep(self.deps.settings.search.usage_flush_s)
            self._spawn(self.flush())  # its own task: stopping this loop never cuts a write

    async def flush(self) -> None:
        """Write every use held now, one write per cube (cubes concurrently)."""
        held = self._pending.items()
        self._pending.clear()
        await asyncio.gather(*(self._write(cube, pending) for cube, pending in held))

    def _write_now(self, cube_id: str, pending: _Pending) -> None:
        self._spawn(self._write(cube_id, pending))

    async def _write(self, cube_id: str, pending: _Pending) -> None:
        try:
            await self.deps.store.record_usage(cube_id, pending.uses, self.deps.settings.search
                                               .usage_history, seen=list(pending.seen.values()))
        except Exception as exc:  # noqa: BLE001 - reported; the searches were answered
            log.warning("usage of %d nodes in %s was not recorded: %s", len(pending.uses),
                        cube_id, exc)
        last = max(r.at for records in pending.uses.values() for r in records)
        if (marked := self._marked.get(cube_id)) is not None and last - marked < MARK_EVERY:
            return
        self._marked.put(cube_id, last)
        try:
            await self.deps.store.mark_used(cube_id, last)
        except Exception as exc:  # noqa: BLE001 - only which cubes a restart warms first
            log.warning("the last search of %s was not noted: %s", cube_id, exc)

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
