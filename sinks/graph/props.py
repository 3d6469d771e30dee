"""How nodes, edges and their addresses become Cypher parameters, and rows become models.

Nodes are flat property maps (``sinks.graph.cypher`` describes the shape); every lookup also
carries the derived ``cube_key`` / ``node_key`` that the indexes serve.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from pydantic import TypeAdapter

from memstream.sinks.graph import cypher, fulltext
from memstream.sinks.ports import TIME_FIELDS, StoreError
from memstream.topics.models import Edge, MemoryItem, MemoryMetadata, SourceRef, UsageRecord

# Stored as JSON text; serialised and parsed in one pydantic-core call each (a node's
# usage history is read with it on every search that returns it).
_JSON_FIELDS: dict[str, TypeAdapter[Any]] = {
    "sources": TypeAdapter(list[SourceRef]),
    "usage": TypeAdapter(list[UsageRecord]),
}
_META_FIELDS = tuple(MemoryMetadata.model_fields)


def node_to_props(item: MemoryItem) -> dict[str, object]:
    """Flat property map of a node; ``None`` values are left out (absent = null in Cypher)."""
    props: dict[str, object] = {"id": item.id, "memory": item.memory}
    meta = item.metadata
    for name in _META_FIELDS:
        value: object = getattr(meta, name)
        if name in _JSON_FIELDS:
            value = _json_text(name, getattr(meta, name))
        elif isinstance(value, datetime):
            value = cypher.iso(value)
        elif isinstance(value, tuple):
            value = list(value)
        if value is not None:
            props[name] = value
    return props


def _json_text(name: str, values: Sequence[Any]) -> str:
    """Compact JSON, non-ASCII kept, ``None`` fields left out."""
    return _JSON_FIELDS[name].dump_json(list(values), exclude_none=True).decode()


def usage_json(records: Sequence[UsageRecord]) -> str:
    """The stored form of a usage history (as ``node_to_props`` writes it)."""
    return _json_text("usage", records)


@functools.lru_cache(maxsize=4096)
def _parsed_sources(text: str) -> tuple[Any, ...]:
    """A node's sources, parsed once per distinct text: the same nodes are read again and
    again (every new fact reads its earlier neighbours), and parsing their sources and usage
    was half of what a replay spent (py-spy). The models are frozen, so one parse serves
    every reader. A usage history is not kept so: every search that returns a node appends
    to it, so its text is new at nearly every read, and the cache filled with histories
    never read again (60,000 usage records held in a search bench's worker, each one more
    object for every full pass of the garbage collector)."""
    return tuple(_JSON_FIELDS["sources"].validate_json(text))


def _parsed(name: str, text: str) -> tuple[Any, ...]:
    if name == "sources":
        return _parsed_sources(text)
    return tuple(_JSON_FIELDS[name].validate_json(text))


def props_to_node(props: Mapping[str, Any]) -> MemoryItem:
    """The node back from its properties (unknown properties are ignored)."""
    meta: dict[str, Any] = {k: props[k] for k in _META_FIELDS if props.get(k) is not None}
    for name in _JSON_FIELDS:
        if name in meta:
            try:
                meta[name] = _parsed(name, meta[name])
            except ValueError as exc:
                raise StoreError(
                    f"stored node {props.get('id')!r} has an invalid {name}: {exc}") from exc
    try:
        return MemoryItem(
            id=props["id"], memory=props["memory"], metadata=MemoryMetadata.model_validate(meta)
        )
    except (KeyError, ValueError) as exc:
        raise StoreError(f"stored node {props.get('id')!r} is not a valid memory: {exc}") from exc


def edge_from_row(row: Mapping[str, Any]) -> Edge:
    return Edge(
        source=row["source"],
        target=row["target"],
        type=cypher.edge_type(row["type"]),
        weight=1.0 if row.get("weight") is None else float(row["weight"]),
        reason=row.get("reason") or "",
    )


def unique_edges(rows: Sequence[Mapping[str, Any]]) -> list[Edge]:
    edges = {(e.source, e.target, e.type): e for e in map(edge_from_row, rows)}
    return [edges[k] for k in sorted(edges)]


def group_value(field: str, value: object) -> object:
    """Times come back as datetimes, like on the nodes; everything else as stored."""
    if field in TIME_FIELDS and isinstance(value, str):
        return datetime.fromisoformat(value)
    return value


def cube_params(cube_id: str) -> dict[str, object]:
    """Parameters addressing a cube (``IN_CUBE``)."""
    return {"cube_id": cube_id, "cube_key": cypher.cube_key(cube_id)}


def node_params(cube_id: str, node_id: str) -> dict[str, object]:
    """Parameters addressing one node (``AT_NODE``)."""
    return {**cube_params(cube_id), "id": node_id, "node_key": cypher.node_key(cube_id, node_id)}


def many_params(cube_id: str, ids: Sequence[str]) -> dict[str, object]:
    """Parameters addressing listed nodes (``ANY_OF``)."""
    keys = [cypher.node_key(cube_id, i) for i in ids]
    return {"cube_id": cube_id, "ids": list(ids), "keys": keys}


def edge_ends(cube_id: str, source: str, target: str) -> dict[str, object]:
    """An edge's two ends: ids and node keys (one row of an UNWIND over edges)."""
    return {
        "source": source,
        "target": target,
        "source_key": cypher.node_key(cube_id, source),
        "target_key": cypher.node_key(cube_id, target),
    }


def pair_params(cube_id: str, source: str, target: str) -> dict[str, object]:
    """Parameters addressing an edge's two ends."""
    return {"cube_id": cube_id, **edge_ends(cube_id, source, target)}


def node_row(cube_id: str, node: MemoryItem) -> dict[str, object]:
    props = node_to_props(node)
    key = cypher.cube_key(cube_id)
    props["cube_key"] = key
    props["node_key"] = cypher.node_key(cube_id, node.id)
    # What the full-text index reads: the cube's token, the words of text, key and tags.
    props[cypher.SEARCH_TEXT] = fulltext.indexed_text(
        key, [node.memory, node.metadata.key, *node.metadata.tags])
    return props
