"""Concurrent requests for the same passage share one computation.

The add stage runs each cube's batch in a task of its own, and a conversation kept in
several cubes (one per participant) stores the same episode text in each: the cubes'
batches arrive together and would embed that text once per cube, and an episode is the
longest text there is (a 5-turn chunk costs the local model ~5 short statements). Here a
text already being embedded for one caller is awaited by the others instead of embedded
again. Nothing is kept once the computation ends (what is remembered, per cube, is the
embedding cache's business), so no cube reads anything another cube did not compute at
the same moment for the same text.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np

from memstream.streams.embed.port import Embedder, Vectors


class SharedInFlight:
    """``inner`` whose concurrent passage requests embed each distinct text once."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.name = inner.name
        self._running: dict[str, asyncio.Future[np.ndarray]] = {}
        self.shared = 0  # texts another request was already embedding

    @property
    def dim(self) -> int:
        return self.inner.dim

    async def embed_passages(self, texts: Sequence[str]) -> Vectors:
        if isinstance(texts, str):
            raise TypeError("pass a sequence of texts, not a single string")
        if not texts:
            return await self.inner.embed_passages(texts)
        loop = asyncio.get_running_loop()
        others: dict[int, asyncio.Future[np.ndarray]] = {}
        mine: dict[str, list[int]] = {}
        for i, text in enumerate(texts):
            if (running := self._running.get(text)) is not None and text not in mine:
                others[i] = running
            else:
                mine.setdefault(text, []).append(i)
        owned = {text: loop.create_future() for text in mine}
        self._running.update(owned)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        try:
            if owned:
                fresh = await self.inner.embed_passages(list(owned))
                for (text, future), row in zip(owned.items(), fresh, strict=True):
                    future.set_result(row)
                    out[mine[text]] = row
        except BaseException:
            for future in owned.values():
                future.cancel()  # the others embed it themselves (below)
            raise
        finally:
            for text, future in owned.items():
                if self._running.get(text) is future:
                    del self._running[text]
        again: list[int] = []
        for i, future in others.items():
            try:
                out[i] = await asyncio.shield(future)
            except asyncio.CancelledError:
                if not future.cancelled():
                    raise  # this request itself was cancelled
                again.append(i)  # its owner failed or was cancelled
        self.shared += len(others) - len(again)
        if again:
            out[again] = await self.inner.embed_passages([texts[i] for i in again])
        return out

    async def embed_queries(self, texts: Sequence[str]) -> Vectors:
        return await self.inner.embed_queries(texts)

    async def close(self) -> None:
        await self.inner.close()
