"""Where a cube's records sit in the log: the provenance index (issue #27).

History, explain and as-of read a cube's records from the log. Every value is sealed with
its cube's key and one partition holds many cubes, so finding them by reading the log costs
the whole log. The worker's provenance indexer (``streams/provenance/``) writes one
``LogRef`` per record of a cube (and, for ``memory.updates``, one per memory the record
names): its topic, partition and offset, event id and node id. Readers ask the index, then
fetch only those records. A ref holds no text; reading the record still needs the cube's key.

Stored in the graph store as ``LogRef`` nodes apart from the cube's memories (``clear_cube``
and replays leave them: the records they point at are still in the log).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from memstream.history.log_index import LogRef, LogRefQuery

Row = dict[str, Any]


_FIELDS = ("x.cube_id AS cube_id, x.topic AS topic, x.partition AS partition, "
           "x.offset AS offset, x.event_id AS event_id, x.node_id AS node_id")

ADD = """
UNWIND $rows AS r
MERGE (x:LogRef {ref_key: r.ref_key})
ON CREATE SET x.cube_id = r.cube_id, x.topic = r.topic, x.partition = r.partition,
              x.offset = r.offset, x.event_id = r.event_id, x.node_id = r.node_id
"""
OF_NODE = f"MATCH (x:LogRef {{node_id: $node_id}}) RETURN {_FIELDS}"
OF_NODE_IN_CUBE = f"MATCH (x:LogRef {{node_id: $node_id}}) WHERE x.cube_id = $cube_id " \
                  f"RETURN {_FIELDS}"
PREFIX_IN_CUBE = ("MATCH (x:LogRef {cube_id: $cube_id}) WHERE x.node_id STARTS WITH $prefix "
                  "RETURN DISTINCT x.node_id AS node_id, x.cube_id AS cube_id LIMIT 3")
PREFIX = ("MATCH (x:LogRef) WHERE x.node_id STARTS WITH $prefix "
          "RETURN DISTINCT x.node_id AS node_id, x.cube_id AS cube_id LIMIT 3")
OF_EVENTS = f"MATCH (x:LogRef) WHERE x.event_id IN $event_ids AND x.cube_id = $cube_id " \
            f"RETURN {_FIELDS}"
OF_TOPIC = f"MATCH (x:LogRef {{cube_id: $cube_id}}) WHERE x.topic = $topic RETURN {_FIELDS}"
OF_TOPIC_NODE_LESS = f"MATCH (x:LogRef {{cube_id: $cube_id}}) WHERE x.topic = $topic " \
                     f"AND coalesce(x.node_id, '') = '' RETURN {_FIELDS}"

DROP_CUBE = ("MATCH (x:LogRef {cube_id: $cube_id}) WITH x LIMIT 5000 DELETE x "
             "RETURN count(*) AS deleted")

NEO4J_SCHEMA = (
    ("log_ref_key", "CREATE CONSTRAINT log_ref_key IF NOT EXISTS "
                    "FOR (n:LogRef) REQUIRE n.ref_key IS UNIQUE"),
    ("log_ref_node", "CREATE INDEX log_ref_node IF NOT EXISTS FOR (n:LogRef) ON (n.node_id)"),
    ("log_ref_cube", "CREATE INDEX log_ref_cube IF NOT EXISTS FOR (n:LogRef) ON (n.cube_id)"),
    ("log_ref_event", "CREATE INDEX log_ref_event IF NOT EXISTS FOR (n:LogRef) ON (n.event_id)"),
)
FALKORDB_SCHEMA = tuple(
    (f"LogRef.{p}", f"CREATE INDEX FOR (n:LogRef) ON (n.{p})")
    for p in ("ref_key", "node_id", "cube_id", "event_id"))


def statement(q: LogRefQuery) -> tuple[str, Mapping[str, object]]:
    """The fixed query answering ``q`` and its parameters (values only ever as parameters)."""
    if q.node_prefix is not None:
        return (PREFIX if q.cube_id is None else PREFIX_IN_CUBE,
                {"prefix": q.node_prefix, "cube_id": q.cube_id})
    if q.node_id is not None:
        return (OF_NODE if q.cube_id is None else OF_NODE_IN_CUBE,
                {"node_id": q.node_id, "cube_id": q.cube_id})
    if q.cube_id is None:
        raise ValueError("a log-ref query by event or topic needs a cube")
    if q.event_ids:
        return OF_EVENTS, {"event_ids": list(q.event_ids), "cube_id": q.cube_id}
    if q.topic is not None:
        return (OF_TOPIC_NODE_LESS if q.node_less else OF_TOPIC,
                {"cube_id": q.cube_id, "topic": q.topic})
    raise ValueError("an empty log-ref query")


def from_row(row: Row) -> LogRef:
    return LogRef(str(row["cube_id"]), str(row.get("topic") or ""), int(row.get("partition") or 0),
                  int(row.get("offset") or 0), str(row.get("event_id") or ""),
                  str(row.get("node_id") or ""))


def to_row(ref: LogRef) -> Row:
    return {"ref_key": ref.key, "cube_id": ref.cube_id, "topic": ref.topic,
            "partition": ref.partition, "offset": ref.offset, "event_id": ref.event_id,
            "node_id": ref.node_id}


class CypherLogRefs:
    """The index over a Cypher store: mixed into ``CypherGraphStore``."""

    _read: Callable[..., Awaitable[list[Row]]]
    _write: Callable[..., Awaitable[list[Row]]]

    async def add_log_refs(self, refs: Sequence[LogRef]) -> None:
        rows = [to_row(r) for r in refs]
        for start in range(0, len(rows), 500):
            await self._write(ADD, {"rows": rows[start:start + 500]})

    async def drop_log_refs(self, cube_id: str) -> int:
        dropped = 0
        while True:
            rows = await self._write(DROP_CUBE, {"cube_id": cube_id})
            deleted = int(rows[0]["deleted"]) if rows else 0
            dropped += deleted
            if deleted == 0:
                return dropped

    async def log_refs(self, query: LogRefQuery) -> list[LogRef]:
        text, params = statement(query)
        refs = [from_row(r) for r in await self._read(text, params)]
        return refs if query.node_prefix is not None else sorted(refs)


class InMemoryLogRefs:
    """The index over a dict: mixed into the in-memory graph double."""

    _log_refs: dict[str, LogRef]

    async def add_log_refs(self, refs: Sequence[LogRef]) -> None:
        held = self.__dict__.setdefault("_log_refs", {})
        for ref in refs:
            held.setdefault(ref.key, ref)

    async def drop_log_refs(self, cube_id: str) -> int:
        held: dict[str, LogRef] = self.__dict__.setdefault("_log_refs", {})
        gone = [k for k, r in held.items() if r.cube_id == cube_id]
        for key in gone:
            del held[key]
        return len(gone)

    async def log_refs(self, query: LogRefQuery) -> list[LogRef]:
        held: dict[str, LogRef] = self.__dict__.setdefault("_log_refs", {})
        statement(query)  # refuses what the Cypher stores refuse
        cube_ok = [r for r in held.values()
                   if query.cube_id is None or r.cube_id == query.cube_id]
        if query.node_prefix is not None:
            found = {(r.node_id, r.cube_id) for r in cube_ok
                     if r.node_id and r.node_id.startswith(query.node_prefix)}
            return [LogRef(c, "", 0, 0, "", n) for n, c in sorted(found)[:3]]
        if query.node_id is not None:
            hits = [r for r in cube_ok if r.node_id == query.node_id]
        elif query.event_ids:
            wanted = set(query.event_ids)
            hits = [r for r in cube_ok if r.event_id in wanted]
        else:
            hits = [r for r in cube_ok if r.topic == query.topic
                    and (not query.node_less or r.node_id == "")]
        return sorted(hits)
