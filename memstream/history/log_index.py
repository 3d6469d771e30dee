"""The provenance index's contract: which topics it covers, the consumer group that builds
it, and the refs one record gives (``sinks/log_refs.py`` stores them).

Shared by the worker's indexer (``streams/provenance/``), which writes the refs, and the
client (``memstream/history/indexed.py``), which waits for the group to pass the end of a
cube's partitions before it trusts the index.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from aiokafka.partitioner import DefaultPartitioner

from memstream.history.provenance import CAUSE_TOPICS
from memstream.topics.registry import CONVERSATIONS, MEMORY_UPDATES, TopicSpec
from memstream.topics.sealing import unseal
from memstream.topics.settings import Settings

# The topics provenance reads: updates, the events that cause them, the chunks they cite.
INDEXED: tuple[TopicSpec, ...] = (MEMORY_UPDATES, *CAUSE_TOPICS, CONVERSATIONS)
_PARTITIONER = DefaultPartitioner()


@dataclass(frozen=True, order=True)
class LogRef:
    cube_id: str
    topic: str  # the registry suffix (``memory.updates``)
    partition: int
    offset: int
    event_id: str
    node_id: str = ""  # "" for a record that names no memory

    @property
    def key(self) -> str:
        return f"{self.topic}:{self.partition}:{self.offset}:{self.node_id}"


@dataclass(frozen=True)
class LogRefQuery:
    """One of: the refs naming ``node_id`` (in ``cube_id``, or any cube when it is None);
    the node ids of ``cube_id`` starting with ``node_prefix``; the refs of ``event_ids`` in
    ``cube_id``; every ref of ``cube_id`` in ``topic`` (``node_less``: those naming no node)."""

    cube_id: str | None = None
    node_id: str | None = None
    node_prefix: str | None = None
    event_ids: tuple[str, ...] = ()
    topic: str | None = None
    node_less: bool = False


def index_group(settings: Settings) -> str:
    """The consumer group of the indexer: its committed offsets are how far the index goes."""
    return f"{settings.app_id}-provenance"


def partition_of(cube_id: str, partitions: int) -> int:
    """The partition a cube's records are in (the producer's default partitioner on the
    cube-id key, as every contract event is keyed)."""
    every = list(range(partitions))
    return int(_PARTITIONER(cube_id.encode(), every, every))


def refs_of(suffix: str, partition: int, offset: int, value: bytes) -> list[LogRef]:
    """The refs of one record: one per memory an update names (its node, the nodes merged
    with it, the copies it evicted, the ends of its edges), or one naming no memory. Nothing
    for a record that cannot be read (an erased cube's, another producer's non-JSON)."""
    try:
        data: Any = json.loads(unseal(value))
    except ValueError:  # erased (pydantic's ValidationError is a ValueError) or not JSON
        return []
    if not isinstance(data, dict):
        return []
    cube, event_id = data.get("cube_id"), data.get("event_id")
    if not isinstance(cube, str) or not isinstance(event_id, str):
        return []
    nodes: set[str] = set()
    if suffix == MEMORY_UPDATES.suffix:
        candidates = [data.get("node_id"), *(data.get("related_ids") or ()),
                      *(data.get("removed_ids") or ())]
        if isinstance(node := data.get("node"), dict):
            candidates.append(node.get("id"))
        for edge in data.get("edges") or ():
            if isinstance(edge, dict):
                candidates += [edge.get("source"), edge.get("target")]
        nodes = {c for c in candidates if isinstance(c, str) and c}
    return [LogRef(cube, suffix, partition, offset, event_id, node)
            for node in sorted(nodes or {""})]
