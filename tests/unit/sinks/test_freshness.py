"""Relaxed reads hold inside their context only, and reach the tasks and threads started in
it (a search's recalls run as tasks, Milvus calls in threads)."""

from __future__ import annotations

import asyncio

from memstream.sinks.freshness import reads_relaxed, relaxed_reads


async def test_reads_are_exact_unless_relaxed_and_the_context_reaches_tasks_and_threads(
) -> None:
    assert not reads_relaxed()
    with relaxed_reads():
        assert reads_relaxed()
        assert await asyncio.create_task(_relaxed_in_task())
        assert await asyncio.to_thread(reads_relaxed)
    assert not reads_relaxed()
    assert not await asyncio.create_task(_relaxed_in_task())


async def _relaxed_in_task() -> bool:
    await asyncio.sleep(0)
    return reads_relaxed()
