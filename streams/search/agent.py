"""Search agent: ``requests`` → replies on each request's ``reply_to``.

Requests of a batch are answered concurrently; usage is recorded in the
background once the replies are sent, never delaying them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from streams.app import BoundTopics, register_batch_agent
from streams.runtime import Deps, Outgoing, RawRecord, StageStats
from streams.search.handlers import WaitApplied, answer, record_usage
from topics.registry import REQUESTS

log = logging.getLogger("memstream.search")


def register(bound: BoundTopics, deps: Deps, wait: WaitApplied) -> StageStats:
    stats = StageStats()
    background: set[asyncio.Task[None]] = set()

    async def handle(raws: Sequence[RawRecord]) -> list[Outgoing]:
        answers = await asyncio.gather(*(answer(raw, deps, wait) for raw in raws))
        outgoing = [o for a in answers for o in a.outgoing]
        await bound.send(outgoing)  # replies first; usage after
        for a in answers:
            if a.request is not None and a.used:
                task = asyncio.create_task(record_usage(deps, a.request, a.used))
                background.add(task)
                task.add_done_callback(_finished(background))
        return []

    w = deps.settings.worker
    register_batch_agent(bound, REQUESTS, "search", handle, stats, w.batch_size,
                         deps.settings.search.batch_within_s)
    return stats


def _finished(background: set[asyncio.Task[None]]):  # type: ignore[no-untyped-def]
    def done(task: asyncio.Task[None]) -> None:
        background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("recording usage failed: %s", task.exception())
    return done
