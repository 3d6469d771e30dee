"""Requests for the same text within moments of each other share one computation.

A conversation kept in several cubes (one per participant) stores the same episode text in
each, and an episode is the longest text there is (a 5-turn chunk costs the local model
about as much as five short statements). The cubes' batches are handled within seconds of
each other, rarely at the same instant (measured: 18 of 46 shared episodes overlapped). So
a text being embedded is awaited by any other request for it, and a finished vector is
lent for ``keep_s`` seconds to a request for the same text (at most ``keep`` of them, by the
text's digest, in memory only). A cube gets only the vector of a text it asked for itself,
exactly as the model would compute it; what is remembered for longer, per cube, is the
embedding cache's business. Erasing a cube empties this (``forget``).

Queries are shared the same way, for ``query_keep_s`` seconds: an agent searching each
participant's cube asks for the same question at the same moment, and on the one query
thread the second search waited for the first one's embedding (bench/retrieval_quality.py,
two cubes a question: the query embedding's p50 41 ms against ~20 ms for one). Queries are
never written anywhere (the cache keeps passages only).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence

import numpy as np

from memstream.streams.embed.port import Embedder, Vectors


class _Kind:
    """What is being embedded, or was just embedded, for one kind of text (passage, query)."""

    def __init__(self, keep: int, keep_s: float) -> None:
        self.running: dict[str, asyncio.Future[np.ndarray]] = {}
        self.recent: OrderedDict[bytes, tuple[float, np.ndarray]] = OrderedDict()
        self.keep, self.keep_s = keep, keep_s

    def lent(self, text: str, now: float) -> np.ndarray | None:
        found = self.recent.get(_digest(text))
        if found is None or now - found[0] > self.keep_s:
            return None
        return found[1]

    def remember(self, text: str, row: np.ndarray, now: float) -> None:
        if self.keep <= 0:
            return
        key = _digest(text)
        self.recent[key] = (now, row)
        self.recent.move_to_end(key)
        while len(self.recent) > self.keep or (
                self.recent and now - next(iter(self.recent.values()))[0] > self.keep_s):
            self.recent.popitem(last=False)


class SharedInFlight:
    """``inner`` whose concurrent requests embed each distinct text once (passages and
    queries apart: a model may embed them differently)."""

    def __init__(self, inner: Embedder, keep: int = 2048, keep_s: float = 120.0,
                 query_keep: int = 64, query_keep_s: float = 10.0) -> None:
        self.inner = inner
        self.name = inner.name
        self._passages = _Kind(keep, keep_s)
        self._queries = _Kind(query_keep, query_keep_s)
        self.shared = 0  # texts another request embedded (at the same time or just before)

    def forget(self) -> None:
        """Drop every vector lent out (a cube is being erased)."""
        self._passages.recent.clear()
        self._queries.recent.clear()

    @property
    def dim(self) -> int:
        return self.inner.dim

    async def embed_passages(self, texts: Sequence[str]) -> Vectors:
        return await self._embed(texts, self._passages, self.inner.embed_passages)

    async def embed_queries(self, texts: Sequence[str]) -> Vectors:
        return await self._embed(texts, self._queries, self.inner.embed_queries)

    async def _embed(self, texts: Sequence[str], kind: _Kind,
                     compute: Callable[[Sequence[str]], Awaitable[Vectors]]) -> Vectors:
        if isinstance(texts, str):
            raise TypeError("pass a sequence of texts, not a single string")
        if not texts:
            return await compute(texts)
        loop = asyncio.get_running_loop()
        now = time.monotonic()
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        others: dict[int, asyncio.Future[np.ndarray]] = {}
        mine: dict[str, list[int]] = {}
        lent = 0
        for i, text in enumerate(texts):
            if text not in mine and (row := kind.lent(text, now)) is not None:
                out[i] = row
                lent += 1
            elif (running := kind.running.get(text)) is not None and text not in mine:
                others[i] = running
            else:
                mine.setdefault(text, []).append(i)
        self.shared += lent
        owned = {text: loop.create_future() for text in mine}
        kind.running.update(owned)
        try:
            if owned:
                fresh = await compute(list(owned))
                done = time.monotonic()
                for (text, future), row in zip(owned.items(), fresh, strict=True):
                    future.set_result(row)
                    out[mine[text]] = row
                    kind.remember(text, row, done)
        except BaseException:
            for future in owned.values():
                future.cancel()  # the others embed it themselves (below)
            raise
        finally:
            for text, future in owned.items():
                if kind.running.get(text) is future:
                    del kind.running[text]
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
            out[again] = await compute([texts[i] for i in again])
        return out

    async def close(self) -> None:
        await self.inner.close()


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()
