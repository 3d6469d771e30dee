"""A worker's stop ends its provenance indexer even when a library swallows the cancellation.

Seen in the scale-out test: a stopped worker's indexer kept reading for 295 s, its stop
waiting on it, because a cancellation delivered inside a client call never came out of it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tests.support.pipeline import Pipeline


async def test_a_stop_ends_the_indexer_whose_store_call_swallowed_the_cancellation(
    pipeline: Pipeline,
) -> None:
    indexer = pipeline.worker.indexer
    assert indexer is not None
    write = indexer.graph.add_log_refs
    inside = asyncio.Event()
    swallowed: list[bool] = []

    async def swallow_one_cancel(refs: Any) -> None:
        if not swallowed:
            inside.set()
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:  # as a client that suppresses its own task's cancel
                swallowed.append(True)
        await write(refs)

    indexer.graph.add_log_refs = swallow_one_cancel  # type: ignore[method-assign]
    await pipeline.client.add_memories("carol", ["I keep two beehives on the roof."])
    await asyncio.wait_for(inside.wait(), 30)
    loop = indexer._task
    assert loop is not None
    stopping = asyncio.create_task(indexer.stop())
    done, _ = await asyncio.wait({stopping}, timeout=30)
    assert done, "the indexer went on after its stop; the stop never returned"
    assert loop.done(), "the stop returned with the indexing loop still running"
    assert swallowed, "the cancellation never reached the store call: the test proved nothing"
