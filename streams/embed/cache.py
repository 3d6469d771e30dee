"""Passage vectors remembered on disk, so the same text is embedded once.

Embedding is most of what ingesting costs on a laptop, and the same texts come back: a
redelivery after a crash, a replay of a cube from its log (``memstream replay``), a merge
that lands on a text seen before. The model is deterministic, so a remembered vector is
the vector it would compute again. Entries are keyed by the embedder's identity (provider,
model, dimensions, the cut of long texts), the cube and the text's digest, and tagged with
the cube: erasing a cube (``delete_cube``) forgets its entries too. Queries are not kept
(what people search for stays out of it).

The store is ``diskcache`` (sqlite underneath: safe across threads and processes, bounded
by ``embedder.cache_mb``, oldest entries evicted first). A cache that fails (a full disk,
a locked file) is skipped with a warning; it never fails an embedding.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import cast

import diskcache
import numpy as np

from memstream.streams import metering
from memstream.streams.embed.inflight import SharedInFlight
from memstream.streams.embed.port import Embedder, Vectors

log = logging.getLogger("memstream.embed.cache")
MB = 1024 * 1024


class CachedEmbedder:
    """``inner`` with its passage vectors kept under ``directory``."""

    def __init__(self, inner: Embedder, directory: Path, identity: str, max_mb: int) -> None:
        self.inner = inner
        self.name = inner.name
        self._identity = identity
        self._cache = diskcache.Cache(str(directory), size_limit=max_mb * MB, tag_index=True,
                                      eviction_policy="least-recently-stored")
        self.hits = 0
        self.misses = 0

    @property
    def dim(self) -> int:
        return self.inner.dim

    def _key(self, cube: str, text: str) -> str:
        digest = hashlib.sha256()
        for part in (self._identity, cube, text):
            digest.update(part.encode("utf-8", "surrogatepass"))
            digest.update(b"\0")
        return digest.hexdigest()

    def _read(self, keys: Sequence[str]) -> list[bytes | None]:
        try:
            return [self._cache.get(key) for key in keys]
        except Exception as exc:  # noqa: BLE001 - a cache that fails is skipped, never fatal
            log.warning("embedding cache unreadable, embedding afresh: %s", exc)
            return [None] * len(keys)

    def _write(self, rows: Sequence[tuple[str, bytes]], cube: str) -> None:
        try:
            with self._cache.transact():
                for key, value in rows:
                    self._cache.set(key, value, tag=cube)
        except Exception as exc:  # noqa: BLE001 - see _read
            log.warning("embedding cache not written: %s", exc)

    async def embed_passages(self, texts: Sequence[str]) -> Vectors:
        if isinstance(texts, str):
            raise TypeError("pass a sequence of texts, not a single string")
        if not texts:
            return await self.inner.embed_passages(texts)
        scope = metering.current()
        cube = scope.cube_id if scope is not None else ""
        keys = [self._key(cube, t) for t in texts]
        stored = await asyncio.to_thread(self._read, keys)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        missing: list[int] = []
        for i, raw in enumerate(stored):
            row = None if raw is None else np.frombuffer(raw, dtype=np.float32)
            if row is None or row.shape != (self.dim,):
                missing.append(i)
            else:
                out[i] = row
        self.hits += len(texts) - len(missing)
        self.misses += len(missing)
        if missing:
            fresh = await self.inner.embed_passages([texts[i] for i in missing])
            out[missing] = fresh
            await asyncio.to_thread(self._write, [
                (keys[i], np.ascontiguousarray(fresh[j], dtype=np.float32).tobytes())
                for j, i in enumerate(missing)], cube)
        return out

    async def embed_queries(self, texts: Sequence[str]) -> Vectors:
        return await self.inner.embed_queries(texts)

    async def forget(self, cube_id: str) -> int:
        """Drop every vector kept for ``cube_id``; returns how many. The file is then
        vacuumed and its log truncated: sqlite keeps deleted rows in free pages otherwise."""
        return int(await asyncio.to_thread(self._forget, cube_id))

    def _forget(self, cube_id: str) -> int:
        count = int(self._cache.evict(cube_id))
        if count:
            self._cache.check(fix=True)  # VACUUM (diskcache's public way to run it)
            self._cache._sql("PRAGMA wal_checkpoint(TRUNCATE)")  # noqa: SLF001
        return count

    async def close(self) -> None:
        try:
            await self.inner.close()
        finally:
            self._cache.close()


async def forget_cube(embedder: Embedder, cube_id: str) -> int:
    """Erase a cube's remembered vectors, if ``embedder`` keeps any (and the vectors lent
    between requests, which are not kept by cube)."""
    forgotten, layer = 0, cast(object | None, embedder)
    while layer is not None:
        if isinstance(layer, CachedEmbedder):
            forgotten += await layer.forget(cube_id)
        elif isinstance(layer, SharedInFlight):
            layer.forget()
        layer = getattr(layer, "inner", None)
    return forgotten
