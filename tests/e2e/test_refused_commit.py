"""A commit the group refuses is sent again: the write behind it reads as applied.

faust records a refused commit as done and drops the acked offsets behind it; when nothing
new arrived on the partition afterwards, its committed offset stayed behind for good and
``wait_applied`` timed out for a memory that was stored (CI saw it after a rebalance).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import CommitFailedError

from memstream.client.client import ClientError
from memstream.history.log_index import index_group
from memstream.topics.registry import MEMORY_ITEMS
from tests.support.pipeline import Pipeline


async def test_a_refused_commit_is_sent_again(pipeline: Pipeline) -> None:
    assert pipeline.worker.app is not None
    thread = pipeline.worker.app.consumer._thread  # type: ignore[attr-defined]
    items = MEMORY_ITEMS.name(pipeline.settings)
    refused: list[dict[Any, int]] = []
    send = thread.commit

    async def refuse_the_first(offsets: Any) -> bool:
        if not refused and any(tp.topic == items for tp in offsets):
            refused.append(dict(offsets))
            return False  # what faust's consumer thread answers when the group refuses it
        return bool(await send(offsets))

    thread.commit = refuse_the_first
    token = await pipeline.client.add_memories("alice", ["I keep bees on my roof."])
    try:
        await pipeline.client.wait_applied(token, timeout=20)
    except ClientError as exc:  # unpatched faust: the refused offset is never sent again
        raise AssertionError(f"the refused commit was not sent again: {exc}") from exc
    assert refused, "no commit of memory.items was refused: the test proved nothing"
    hits = await pipeline.client.search("alice", "bees", top_k=1)
    assert hits and "bees" in hits[0].item.memory


async def test_a_refused_commit_of_the_provenance_index_is_sent_again(
    pipeline: Pipeline,
) -> None:
    indexer = pipeline.worker.indexer
    assert indexer is not None and indexer._consumer is not None
    consumer = indexer._consumer
    refused: list[dict[Any, Any]] = []
    send = consumer.commit

    async def refuse_the_first(offsets: Any = None) -> None:
        if not refused:
            refused.append(dict(offsets))
            raise CommitFailedError("the group rebalanced")  # as aiokafka raises a refusal
        await send(offsets)

    consumer.commit = refuse_the_first
    token = await pipeline.client.add_memories("bob", ["My sister lives in Tromsø."])
    await pipeline.client.wait_applied(token, timeout=20)
    # the index's own group: the lag `status` reports, and where a restart resumes
    reader = AIOKafkaConsumer(bootstrap_servers=pipeline.bootstrap,
                              group_id=index_group(pipeline.settings), enable_auto_commit=False)
    await reader.start()
    try:
        tp = TopicPartition(token.topic, token.partition)
        deadline = time.monotonic() + 20
        while (await reader.committed(tp) or 0) <= token.offset:
            assert time.monotonic() < deadline, "the refused commit was not sent again"
            await asyncio.sleep(0.1)
    finally:
        await reader.stop()
    assert refused, "the provenance index committed nothing: the test proved nothing"
