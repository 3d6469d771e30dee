"""Two cubes embedding the same episode at the same moment compute it once; a failure of
the request that computes it does not fail the other."""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import Sequence

import numpy as np
import pytest

from memstream.streams import metering
from memstream.streams.embed.cache import CachedEmbedder, forget_cube
from memstream.streams.embed.inflight import SharedInFlight
from memstream.streams.embed.local import LocalEmbedder
from memstream.streams.embed.port import EmbedderError, Vectors


class Counting:
    """The local model, counting the texts it is asked for, slowed so requests overlap."""

    name = "counting"

    def __init__(self, fail_first: bool = False) -> None:
        self.model = LocalEmbedder()
        self.asked: list[str] = []
        self.fail_first = fail_first

    @property
    def dim(self) -> int:
        return self.model.dim

    async def embed_passages(self, texts: Sequence[str]) -> Vectors:
        self.asked.extend(texts)
        await asyncio.sleep(0.05)
        if self.fail_first:
            self.fail_first = False
            raise EmbedderError("endpoint down")
        return await self.model.embed_passages(texts)

    async def embed_queries(self, texts: Sequence[str]) -> Vectors:
        self.asked.extend(f"query: {t}" for t in texts)
        await asyncio.sleep(0.05)
        return await self.model.embed_queries(texts)

    async def close(self) -> None:
        await self.model.close()


EPISODE = "[2023-05-08 13:56] Caroline: I went to a support group.\n[2023-05-08 13:57] Mel: Cool!"


async def test_the_same_text_requested_at_once_is_embedded_once() -> None:
    inner = Counting()
    shared = SharedInFlight(inner)
    a, b = await asyncio.gather(shared.embed_passages([EPISODE, "I went to a support group."]),
                                shared.embed_passages(["Caroline: support group", EPISODE]))
    assert inner.asked.count(EPISODE) == 1 and shared.shared == 1
    alone = await LocalEmbedder().embed_passages([EPISODE])
    np.testing.assert_allclose(a[0], alone[0], atol=1e-5)
    np.testing.assert_allclose(b[1], alone[0], atol=1e-5)
    assert a.shape == b.shape == (2, 384)
    # lent for moments after: asked again, it is not embedded again
    await shared.embed_passages([EPISODE])
    assert inner.asked.count(EPISODE) == 1 and shared.shared == 2


async def test_a_failed_owner_leaves_the_waiter_to_embed_it_itself() -> None:
    inner = Counting(fail_first=True)
    shared = SharedInFlight(inner)
    owner, waiter = await asyncio.gather(shared.embed_passages([EPISODE]),
                                         shared.embed_passages([EPISODE]),
                                         return_exceptions=True)
    assert isinstance(owner, EmbedderError)
    assert isinstance(waiter, np.ndarray) and waiter.shape == (1, 384)
    assert inner.asked.count(EPISODE) == 2 and shared.shared == 0


async def test_repeats_within_one_request_are_embedded_once() -> None:
    inner = Counting()
    shared = SharedInFlight(inner)
    out = await shared.embed_passages(["tea", "coffee", "tea"])
    assert inner.asked == ["tea", "coffee"]
    np.testing.assert_allclose(out[0], out[2])
    with pytest.raises(TypeError):
        await shared.embed_passages("tea")


async def test_a_vector_is_lent_for_moments_and_forgotten_on_erasure(
        tmp_path: pathlib.Path) -> None:
    inner = Counting()
    shared = SharedInFlight(inner, keep_s=60)
    cached = CachedEmbedder(shared, tmp_path, "test", 16)
    async def in_cube(cube: str) -> None:
        metering.enter("add", cube)  # this task's scope: the cache's key names the cube
        await cached.embed_passages([EPISODE])

    await asyncio.create_task(in_cube("alice"))
    await asyncio.create_task(in_cube("bob"))  # a moment later: lent, not embedded
    assert inner.asked.count(EPISODE) == 1 and shared.shared == 1
    await forget_cube(cached, "alice")
    await asyncio.create_task(in_cube("carol"))  # after an erasure nothing is lent
    assert inner.asked.count(EPISODE) == 2
    expired = SharedInFlight(Counting(), keep_s=0)
    await expired.embed_passages([EPISODE])
    await expired.embed_passages([EPISODE])
    assert expired.shared == 0


async def test_a_question_searched_in_two_cubes_at_once_is_embedded_once() -> None:
    """An agent searching each participant's cube asks both with the same question."""
    inner = Counting()
    shared = SharedInFlight(inner)
    question = "What did Caroline go to?"
    a, b = await asyncio.gather(shared.embed_queries([question]),
                                shared.embed_queries([question]))
    assert inner.asked == [f"query: {question}"]
    alone = await LocalEmbedder().embed_queries([question])
    np.testing.assert_allclose(a[0], alone[0], atol=1e-5)
    np.testing.assert_allclose(b[0], alone[0], atol=1e-5)
    # a query's vector is never lent to a passage of the same text (e5 embeds them apart)
    passage = await shared.embed_passages([question])
    assert inner.asked == [f"query: {question}", question]
    assert not np.allclose(passage[0], a[0], atol=1e-3)
