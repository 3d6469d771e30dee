"""A node's vector: one function of the node, whichever path computes it.

The add stage, a redelivery's completion, the optimizer's concepts, summaries and inferred
facts, working-memory copies and a user's edit all embed nodes through ``node_vectors``, so
the rule (``MemoryItem.embedding_text``: an episode without the time at the head of each
line) is applied everywhere or nowhere.
"""

from __future__ import annotations

from collections.abc import Sequence

from memstream.streams.embed.port import Embedder
from memstream.topics.models import MemoryItem


async def node_vectors(embedder: Embedder, nodes: Sequence[MemoryItem]) -> list[list[float]]:
    """Each node's passage vector, in order (``sinks.memory_store.EmbedNodes`` once bound)."""
    return [v.tolist() for v in await embedder.embed_passages([n.embedding_text for n in nodes])]
