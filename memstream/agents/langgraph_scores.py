"""One score scale for a LangGraph search that spans several namespaces.

memstream scores a search within one cube and relative to that cube's candidates: first
place in every ranking it fuses scores 1, so a namespace (a cube) holding one item scores it
1.0 whatever the query, and the scores of two namespaces do not compare ("Oslo" ranked
"Alice is vegetarian." above "Carol lives in Oslo."). A search over several namespaces is
therefore scored again over the merged candidates, as one search of a cube holding them all
would score them (``streams/core/retrieval.py``, fast mode): the cosine of each candidate's
vector with the query's ranks them all, BM25 over their words ranks those sharing the
query's words, an exact key match ranks those whose key is the query; the ranks are fused by
reciprocal rank with the search recipe's weights, normalised so that first in every ranking
scores 1, and a candidate found by its vector alone is weighted by how far its cosine
stands above the others' (``cosine_standing``).

The vectors are computed here with the embedder the settings name (the worker's, so the
same vectors), through the one function that embeds a node, and kept per node text.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from memstream.topics.models import MemoryItem
from memstream.topics.settings import Settings

if TYPE_CHECKING:
    from memstream.streams.embed.port import Embedder

CACHED_VECTORS = 4096  # node vectors kept between searches (a few MB at 384 dimensions)


class MergedScores:
    """Scores candidates from several cubes for one query on one scale."""

    def __init__(self, settings: Settings, embedder: Embedder | None = None) -> None:
        """``embedder``: the one to use (default: built from ``settings`` when first
        needed, and closed by ``close``)."""
        self.settings = settings
        self._embedder = embedder
        self._own = embedder is None
        self._vectors: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()

    def embedder(self) -> Embedder:
        if self._embedder is None:
            from memstream.streams.embed.factory import create_embedder

            self._embedder = create_embedder(self.settings.embedder,
                                             self.settings.limits.embed_chars)
        return self._embedder

    async def close(self) -> None:
        if self._own and self._embedder is not None:
            await self._embedder.close()
            self._embedder = None

    async def scores(self, query: str, nodes: Sequence[MemoryItem]) -> list[float]:
        """Each node's score for ``query`` in [0, 1], as if they were one cube's candidates."""
        from memstream.streams.core.lexical import BM25, terms
        from memstream.streams.core.retrieval import cosine_standing

        if not nodes:
            return []
        query_vector = (await self.embedder().embed_queries([query]))[0]
        cosines = (await self._node_vectors(nodes)) @ np.asarray(query_vector)
        ids = list(range(len(nodes)))
        lexical = BM25([terms(n.memory) for n in nodes]).scores(terms(query))
        ranked = {
            "vector": sorted(ids, key=lambda i: -cosines[i]),
            "keyword": sorted((i for i in ids if lexical[i] > 0), key=lambda i: -lexical[i]),
            "key": [i for i in ids if nodes[i].metadata.key == query],
        }
        fused = self._fuse(ranked)
        matched = {i for name, found in ranked.items() if name != "vector" for i in found}
        standing = cosine_standing([float(c) for c in cosines],
                                   self.settings.search.ranking.boosts.cosine_spread)
        return [fused.get(i, 0.0) * (1.0 if i in matched else standing[i]) for i in ids]

    def _fuse(self, ranked: dict[str, list[int]]) -> dict[int, float]:
        """Reciprocal-rank fusion as the search stage's ``fuse``: first in every list = 1."""
        from memstream.streams.core.retrieval import statement_weights

        fusion = self.settings.search.ranking.fusion
        weights = statement_weights(fusion)
        k = fusion.statement_k
        fused: dict[int, float] = {}
        best = 0.0
        for name, found in ranked.items():
            if weights[name] <= 0 or not found:
                continue
            best += weights[name] / (k + 1)
            for rank, i in enumerate(found, start=1):
                fused[i] = fused.get(i, 0.0) + weights[name] / (k + rank)
        return {i: v / best for i, v in fused.items()} if best > 0 else fused

    async def _node_vectors(self, nodes: Sequence[MemoryItem]) -> np.ndarray:
        from memstream.streams.embed.nodes import node_vectors

        keys = [(n.id, n.embedding_text) for n in nodes]
        missing = [n for n, key in zip(nodes, keys, strict=True) if key not in self._vectors]
        if missing:
            for node, row in zip(missing, await node_vectors(self.embedder(), missing),
                                 strict=True):
                self._vectors[(node.id, node.embedding_text)] = np.asarray(row,
                                                                           dtype=np.float32)
        rows = np.vstack([self._vectors[key] for key in keys])
        for key in keys:
            self._vectors.move_to_end(key)
        while len(self._vectors) > CACHED_VECTORS:
            self._vectors.popitem(last=False)
        return rows
