"""A chunk's facts decided together, however the add stage's batches cut the chunk.

Extraction sends a chat chunk's facts together, but a batch of the add stage may end in the
middle of them. The facts of such a head are written undecided (``generated``: not
searchable) and decided with the rest, in the batch that brings the chunk's last fact
(``index == count - 1``): one merge review and one reorganize event per chunk, the same
questions and the same event whatever the cut. The chunk's facts are found in the store by
their ``EXTRACTED_FROM`` edges to the chunk's episode.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from memstream.streams.core.review import chunk_of
from memstream.streams.runtime.stage import Deps, Record
from memstream.topics.events import ExtractedMemory
from memstream.topics.models import MemoryItem


def chunk_key(record: Record[ExtractedMemory]) -> str:
    """The chunk an item was extracted from (its own id for an item added directly)."""
    item = record.value
    return item.chunk_event_id or item.id or item.event_id


def heads(records: Mapping[str, Record[ExtractedMemory]],
          nodes: Mapping[str, MemoryItem]) -> set[str]:
    """Chunks (keys) of which these records hold facts with an episode, but not the last."""
    groups: dict[str, list[Record[ExtractedMemory]]] = {}
    for nid, record in records.items():
        if record.value.memory_type != "EpisodicMemory" and chunk_of(nodes[nid]) is not None:
            groups.setdefault(chunk_key(record), []).append(record)
    return {key for key, group in groups.items()
            if not any(r.value.index == r.value.count - 1 for r in group)}


async def chunk_facts(deps: Deps, node: MemoryItem) -> list[str]:
    """Ids of the facts stored from ``node``'s chunk (any status), by id."""
    episode = chunk_of(node)
    if episode is None:
        return []
    edges = await deps.query.edges_of(node.metadata.cube_id, episode, ["EXTRACTED_FROM"], "in")
    return sorted({e.source for e in edges})


async def undecided(deps: Deps, node: MemoryItem,
                    exclude: Collection[str]) -> list[tuple[MemoryItem, Sequence[float]]]:
    """The chunk's facts an earlier batch left undecided, with their vectors, in log order."""
    cube = node.metadata.cube_id
    ids = [i for i in await chunk_facts(deps, node) if i not in exclude]
    if not ids:
        return []
    found = [n for n in await deps.query.get_nodes(cube, ids) if n.metadata.status == "generated"]
    rows = {r.id: r.vector for r in await deps.query.vectors(cube, [n.id for n in found])}
    found.sort(key=lambda n: (n.metadata.created_at, n.id))
    return [(n.evolve(status="activated"), rows[n.id]) for n in found if n.id in rows]


async def decided_with(deps: Deps, node: MemoryItem,
                       exclude: Collection[str]) -> list[MemoryItem]:
    """The chunk's facts from earlier batches that its last fact ``node`` decided (they are no
    longer ``generated``), in log order: what that fact's delivery announced with it."""
    cube = node.metadata.cube_id
    ids = [i for i in await chunk_facts(deps, node) if i not in exclude and i != node.id]
    if not ids:
        return []
    found = [n for n in await deps.query.get_nodes(cube, ids) if n.metadata.status != "generated"]
    found.sort(key=lambda n: (n.metadata.created_at, n.id))
    return found
