"""A few passages are embedded beside the bulk batches, not after them (the optimizer's
single texts waited behind ingestion's batches)."""

from __future__ import annotations

import asyncio

from memstream.streams.embed.local import LocalEmbedder


async def test_a_single_text_does_not_wait_for_bulk_batches() -> None:
    embedder = LocalEmbedder(batch_size=8)
    done: list[str] = []
    long = "We walked along the river for hours and talked about the new job. " * 6

    async def embed(name: str, texts: list[str]) -> None:
        await embedder.embed_passages(texts)
        done.append(name)

    try:
        first = asyncio.create_task(embed("first bulk", [f"{i} {long}" for i in range(16)]))
        second = asyncio.create_task(embed("second bulk", [f"{long} {i}" for i in range(8)]))
        await asyncio.sleep(0)  # the first batch of each is submitted (the second: its only one)
        single = asyncio.create_task(embed("single", ["I am allergic to shellfish."]))
        await asyncio.gather(first, second, single)
    finally:
        await embedder.close()
    assert done.index("single") < done.index("second bulk"), done
    assert done.index("single") < done.index("first bulk"), done
