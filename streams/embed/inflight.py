"""Requests for the same passage text within moments of each other share one computation.

A conversation kept in several cubes (one per participant) stores the same episode text in
each, and an episode is the longest text there is (a 5-turn chunk costs the local model
about as much as five short statements). The cubes' batches are handled within seconds of
each other, rarely at the same instant (measured: 18 of 46 shared episodes overlapped). So
a text being embedded is awaited by any other request for it, and a finished vector is
lent for ``keep_s`` seconds to a request for the same text (at most ``keep`` of them, by the
text's digest, in memory only). A cube gets only the vector of a text it asked for itself,
exactly as the model would compute it; what is remembered for longer, per cube, is the
embedding cache's business. Erasing a cube empties this (``forget``).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from memstream.streams.embed.port import Embedder, Vectors


class SharedInFlight:
    """``inner`` whose concurrent passage requests embed each distinct text once."""

    def __init__(self, inner: Embedder, keep: int = 256, keep_s: float = 120.0) -> None:
        self.inner = inner
        self.name = inner.name
        self._running: dict[str, asyncio.Future[np.ndarray]] = {}
        self._recent: OrderedDict[bytes, tuple[float, np.ndarray]] = OrderedDict()
        self._keep, self._keep_s = keep, keep_s
        self.shared = 0  # texts another request embedded (at the same time or just before)

    def _lent(self, text: str, now: float) -> np.ndarray | None:
        found = self._recent.get(_digest(text))
        if found is None or now - found[0] > self._keep_s:
            return None
        return found[1]

    def _remember(self, text: str, row: np.ndarray, now: float) -> None:
        if self._keep <= 0:
            return
        key = _digest(text)
        self._recent[key] = (now, row)
        self._recent.move_to_end(key)
        while len(self._recent) > self._keep or (
                self._recent and now - next(iter(self._recent.values()))[0] > self._keep_s):
            self._recent.popitem(last=False)

    def forget(self) -> None:
        """Drop every vector lent out (a cube is being erased)."""
        self._recent.clear()

    @property
    def dim(self) -> int:
        return self.inner.dim

    async def embed_passages(self, texts: Sequence[str]) -> Vectors:
        if isinstance(texts, str):
            raise TypeError("pass a sequence of texts, not a single string")
        if not texts:
            return await self.inner.embed_passages(texts)
        loop = asyncio.get_running_loop()
        now = time.monotonic()
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        others: dict[int, asyncio.Future[np.ndarray]] = {}
        mine: dict[str, list[int]] = {}
        lent = 0
        for i, text in enumerate(texts):
            if text not in mine and (row := self._lent(text, now)) is not None:
                out[i] = row
                lent += 1
            elif (running := self._running.get(text)) is not None and text not in mine:
                others[i] = running
            else:
                mine.setdefault(text, []).append(i)
        self.shared += lent
        owned = {text: loop.create_future() for text in mine}
        self._running.update(owned)
        try:
            if owned:
                fresh = await self.inner.embed_passages(list(owned))
                done = time.monotonic()
                for (text, future), row in zip(owned.items(), fresh, strict=True):
                    future.set_result(row)
                    out[mine[text]] = row
                    self._remember(text, row, done)
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


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()
