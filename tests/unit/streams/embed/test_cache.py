"""The embedding cache (streams/embed/cache.py): a text is embedded once per model and cube,
the vector read back is the one computed, a cube's erasure forgets its vectors, and a cache
that cannot be used never fails an embedding."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from memstream.streams import metering
from memstream.streams.commands.logic import run_command
from memstream.streams.embed.cache import CachedEmbedder
from memstream.streams.embed.port import Embedder, Vectors
from memstream.topics.events import DeleteCube
from tests.support.doubles import local_embedder, memory_deps, remember

TEXTS = ["I moved to Lyon last week.", "我喜欢在周末爬山。", "My sister Ana plays the cello."]


class Counting:
    """The local model, counting the passages it is asked to embed."""

    def __init__(self, inner: Embedder) -> None:
        self.inner, self.name, self.passages = inner, inner.name, 0

    @property
    def dim(self) -> int:
        return self.inner.dim

    async def embed_passages(self, texts: Sequence[str]) -> Vectors:
        self.passages += len(texts)
        return await self.inner.embed_passages(texts)

    async def embed_queries(self, texts: Sequence[str]) -> Vectors:
        return await self.inner.embed_queries(texts)

    async def close(self) -> None:
        return None


def cached(tmp_path: Path, identity: str = "local|e5|384") -> tuple[CachedEmbedder, Counting]:
    model = Counting(local_embedder())
    return CachedEmbedder(model, tmp_path / "cache", identity, max_mb=16), model


async def test_a_text_is_embedded_once_and_read_back_as_computed(tmp_path: Path) -> None:
    embedder, model = cached(tmp_path)
    metering.enter("add", "ana")
    first = await embedder.embed_passages(TEXTS)
    again = await embedder.embed_passages([TEXTS[2], "A new sentence.", TEXTS[0]])
    assert model.passages == len(TEXTS) + 1
    assert np.array_equal(again[0], first[2]) and np.array_equal(again[2], first[0])
    fresh = await local_embedder().embed_passages(["A new sentence."])
    assert np.allclose(again[1], fresh[0], atol=1e-6)
    await embedder.close()
    # kept on disk: a restarted worker reads them back
    reopened, model = cached(tmp_path)
    assert np.array_equal(await reopened.embed_passages(TEXTS), first) and model.passages == 0
    await reopened.close()


async def test_entries_are_per_model_and_per_cube_and_queries_are_not_kept(
    tmp_path: Path,
) -> None:
    embedder, model = cached(tmp_path)
    metering.enter("add", "ana")
    await embedder.embed_passages(TEXTS)
    metering.enter("add", "ben")
    await embedder.embed_passages(TEXTS)
    assert model.passages == 2 * len(TEXTS)
    await embedder.embed_queries(TEXTS)
    other, other_model = cached(tmp_path, identity="openai|http://e|text-embedding-3-small")
    await other.embed_passages(TEXTS)
    assert other_model.passages == len(TEXTS)
    assert len(embedder._cache) == 3 * len(TEXTS)  # no query among them
    await embedder.close()
    await other.close()


async def test_erasing_a_cube_forgets_its_vectors_only(tmp_path: Path) -> None:
    embedder, model = cached(tmp_path)
    deps = memory_deps(tmp_path, embedder=embedder)
    metering.enter("add", "ana")
    await remember(deps, "ana", *TEXTS)
    metering.enter("add", "ben")
    await remember(deps, "ben", *TEXTS)
    await run_command(DeleteCube(user_id="ana", cube_id="ana"), deps)
    model.passages = 0
    metering.enter("add", "ben")
    await embedder.embed_passages(TEXTS)
    assert model.passages == 0  # ben's are kept
    metering.enter("add", "ana")
    await embedder.embed_passages(TEXTS)
    assert model.passages == len(TEXTS)  # ana's were forgotten with her cube
    await embedder.close()


async def test_a_cache_that_cannot_be_used_never_fails_an_embedding(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    embedder, model = cached(tmp_path)
    embedder._cache.close()
    shutil.rmtree(tmp_path / "cache")
    (tmp_path / "cache").write_text("not a directory")  # the cache's file cannot be opened
    out = await embedder.embed_passages(TEXTS)
    assert out.shape == (len(TEXTS), embedder.dim) and model.passages == len(TEXTS)
    assert np.allclose(out, await local_embedder().embed_passages(TEXTS), atol=1e-6)
    assert "embedding cache unreadable" in caplog.text
    assert "embedding cache not written" in caplog.text
