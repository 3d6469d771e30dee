"""The Cypher shared by the Neo4j and FalkorDB adapters.

Storage shape: one label ``Memory`` with flat properties (lists as list properties,
``sources``/``usage`` as JSON strings, times as fixed-width ISO-8601 UTC strings so that
string order is time order). Edges are typed relationships between nodes of one cube.

Rules every query here follows:
- every MATCH is scoped by ``cube_id``;
- values travel only as parameters; the only identifiers put into query text are edge
  types from ``EDGE_TYPES``, field names from ``FILTER_FIELDS``, and integers we validated;
- only the common subset of Neo4j 5 and FalkorDB Cypher is used. The differences we hit
  are in ``Dialect`` (``sinks.graph.dialect``); the ones we avoid are noted there.
Filters compile in ``sinks.graph.filters``; both are re-exported here.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

# Re-exported: adapters and tests see one module of shared Cypher.
from memstream.sinks.graph.dialect import FALKORDB as FALKORDB
from memstream.sinks.graph.dialect import NEO4J as NEO4J
from memstream.sinks.graph.dialect import Dialect as Dialect
from memstream.sinks.graph.filters import BOOL_FIELDS as BOOL_FIELDS
from memstream.sinks.graph.filters import LIST_FIELDS as LIST_FIELDS
from memstream.sinks.graph.filters import NUMBER_FIELDS as NUMBER_FIELDS
from memstream.sinks.graph.filters import compile_filters as compile_filters
from memstream.sinks.graph.filters import iso as iso
from memstream.sinks.ports import FILTER_FIELDS, Direction, StoreError
from memstream.topics.models import EDGE_TYPES, EdgeType


def edge_type(value: str) -> EdgeType:
    """The edge type if it is one of ours; the only way a type reaches query text."""
    for known in EDGE_TYPES:
        if value == known:
            return known
    raise StoreError(f"unknown edge type {value!r}")


def _pattern(direction: Direction, rel: str) -> str:
    """``(a)-[rel]->(b)`` for out, ``<-`` for in, undirected for any (a is the given node)."""
    match direction:
        case "out":
            return f"-[{rel}]->"
        case "in":
            return f"<-[{rel}]-"
        case "any":
            return f"-[{rel}]-"
    raise StoreError(f"unknown direction {direction!r}")


def _bounded_int(value: int, name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise StoreError(f"{name} must be an integer in [{low}, {high}], got {value!r}")
    return value


# -- addressing ----------------------------------------------------------------------------
#
# Lookups go through two derived, indexed properties: ``cube_key`` (of the cube id) and
# ``node_key`` (of cube id + node id), hex digests. FalkorDB 4.16.3's range index trims
# ASCII whitespace from stored strings but not from lookups, so an index on ``cube_id`` or
# ``id`` would miss "x " and conflate "a" with "a\n" (two cubes made one). Hex keys have
# no such edges; every pattern also compares ``cube_id`` / ``id`` themselves, which no
# index serves, so matching stays exact on every engine.


def cube_key(cube_id: str) -> str:
    return hashlib.sha256(cube_id.encode()).hexdigest()[:32]


def node_key(cube_id: str, node_id: str) -> str:
    # Length-prefixed so that ("a", "bc") and ("ab", "c") differ.
    return hashlib.sha256(f"{len(cube_id)}:{cube_id}|{node_id}".encode()).hexdigest()[:32]


IN_CUBE = "cube_key: $cube_key, cube_id: $cube_id"  # the cube's nodes (index on cube_key)
AT_NODE = "node_key: $node_key, cube_id: $cube_id, id: $id"  # one node (index on node_key)
ANY_OF = "n.node_key IN $keys AND n.cube_id = $cube_id AND n.id IN $ids"  # listed nodes

# -- nodes -------------------------------------------------------------------------------

NODE = "properties(n) AS props"
# Replace-or-insert: ``SET n = row`` drops properties the new version does not have.
# Rows carry cube_id, id and both keys.
UPSERT_NODES = """
UNWIND $rows AS row
MERGE (n:Memory {node_key: row.node_key})
SET n = row
RETURN count(*) AS written
"""
UPDATE_NODE = f"""
MATCH (n:Memory {{{AT_NODE}}})
SET n = $props
RETURN count(n) AS updated
"""
# Only the usage history changes: a concurrent status change (a merge) is never undone. An
# expired node is a tombstone whose text was erased: a use (its query is text) never lands on
# it, even from a search that returned it before it expired.
SET_USAGE = """
UNWIND $rows AS row
MATCH (n:Memory {node_key: row.node_key})
WHERE n.cube_id = $cube_id AND n.id = row.id AND n.status <> 'expired'
SET n.usage = row.usage
RETURN count(n) AS updated
"""
# The same, only where the history is still the one the caller read (compare-and-set).
SET_USAGE_IF_UNCHANGED = """
UNWIND $rows AS row
MATCH (n:Memory {node_key: row.node_key})
WHERE n.cube_id = $cube_id AND n.id = row.id AND coalesce(n.usage, '[]') = row.expected
  AND n.status <> 'expired'
SET n.usage = row.usage
RETURN collect(n.id) AS updated
"""
DELETE_NODES = f"""
MATCH (n:Memory)
WHERE {ANY_OF}
DETACH DELETE n
RETURN count(*) AS deleted
"""
GET_NODES = f"""
MATCH (n:Memory)
WHERE {ANY_OF}
RETURN {NODE}
"""
ALL_NODES = f"""
MATCH (n:Memory {{{IN_CUBE}}})
RETURN {NODE}
ORDER BY n.id
"""
# Bounded so a huge cube is erased in several short writes.
CLEAR_CUBE_BATCH = f"""
MATCH (n:Memory {{{IN_CUBE}}})
WITH n LIMIT $batch
DETACH DELETE n
RETURN count(*) AS deleted
"""
# A cube's access record: one node outside the Memory label, shares as JSON lists.
GET_CUBE_ACCESS = """
MATCH (a:CubeAccess {cube_id: $cube_id})
RETURN a.owner AS owner, a.readers AS readers, a.writers AS writers
"""

SET_CUBE_ACCESS = """
MERGE (a:CubeAccess {cube_id: $cube_id})
SET a.owner = $owner, a.readers = $readers, a.writers = $writers
"""

# LLM token spend per cube, period and call (the budget ledger), outside the Memory label.
LLM_SPEND = """
MATCH (s:LLMSpend {cube_id: $cube_id, period: $period})
RETURN s.call AS call, s.tokens AS tokens
"""

DROP_OLD_LLM_SPEND = """
MATCH (s:LLMSpend {cube_id: $cube_id})
WHERE s.period <> $period
DELETE s
"""

RECORD_LLM_SPEND = """
MERGE (s:LLMSpend {cube_id: $cube_id, period: $period, call: $call})
SET s.tokens = $tokens
"""

# The model's answers to the cube's ingestion questions, by call key (streams.ops.journal):
# a redelivered or replayed input reads its answer instead of asking again.
LLM_ANSWER = """
MATCH (a:LLMAnswer {call: $call})
WHERE a.cube_id = $cube_id
RETURN a.answer AS answer
"""

RECORD_LLM_ANSWER = """
MERGE (a:LLMAnswer {call: $call, cube_id: $cube_id})
SET a.answer = $answer
"""

DROP_LLM_ANSWERS = """
MATCH (a:LLMAnswer)
WHERE a.cube_id = $cube_id AND a.call IN $calls
DELETE a
"""

CLEAR_LLM_ANSWERS = """
MATCH (a:LLMAnswer {cube_id: $cube_id})
DELETE a
"""

# Only a cube that still holds memories: a search answered just before its cube's erasure,
# noted just after, must not bring the erased cube's id back.
MARK_CUBE_USED = f"""
MATCH (n:Memory {{{IN_CUBE}}})
WITH n LIMIT 1
MERGE (u:CubeUse {{cube_id: $cube_id}})
SET u.used_at = $at
"""

CLEAR_CUBE_USE = """
MATCH (u:CubeUse {cube_id: $cube_id})
DELETE u
"""

LIST_CUBES = """
MATCH (n:Memory)
RETURN DISTINCT n.cube_id AS cube_id
ORDER BY cube_id
"""
# A cube searched later than it changed counts from its last search (one CubeUse node a
# cube, outside the Memory label, holding no text).
RECENT_CUBES = """
MATCH (n:Memory)
WITH n.cube_id AS cube_id, max(n.updated_at) AS changed
WHERE cube_id IS NOT NULL
OPTIONAL MATCH (u:CubeUse {cube_id: cube_id})
WITH cube_id, CASE WHEN u.used_at > changed THEN u.used_at ELSE changed END AS last
RETURN cube_id, last
ORDER BY last DESC, cube_id
LIMIT $limit
"""
NEIGHBORS_BY_TAGS = f"""
MATCH (n:Memory {{{IN_CUBE}, status: 'activated'}})
WHERE NOT n.memory_type IN ['WorkingMemory', 'EpisodicMemory'] AND n.type <> 'reasoning'
  AND NOT n.id IN $exclude_ids
WITH n, size([t IN coalesce(n.tags, []) WHERE t IN $tags]) AS overlap
WHERE overlap >= $min_overlap
RETURN {NODE}, overlap
ORDER BY overlap DESC, n.updated_at DESC, n.id
LIMIT $limit
"""
CHILDREN = f"""
MATCH (:Memory {{{AT_NODE}}})-[:PARENT]->(n:Memory {{cube_id: $cube_id}})
RETURN {NODE}
ORDER BY n.created_at, n.id
"""
# FIFO by updated_at: keep the newest ``keep``, delete the rest (ties: smaller id goes first).
_BEYOND_KEEP = f"""
MATCH (n:Memory {{{IN_CUBE}, memory_type: $memory_type, status: 'activated'}})
WITH n ORDER BY n.updated_at DESC, n.id DESC
SKIP $keep
"""
REMOVE_OLDEST = f"""{_BEYOND_KEEP}WITH n, n.id AS removed
DETACH DELETE n
RETURN removed
"""
# What REMOVE_OLDEST would delete, ids only, newest first.
BEYOND_CAPACITY = f"""{_BEYOND_KEEP}RETURN n.id AS id
"""
# Pattern predicate rather than NOT EXISTS {...}: see ``Dialect``.
OPTIMIZATION_CANDIDATES = f"""
MATCH (n:Memory {{{IN_CUBE}, memory_type: $memory_type, status: 'activated'}})
WHERE NOT (:Memory {{cube_id: $cube_id}})-[:PARENT]->(n)
RETURN {NODE}
ORDER BY n.created_at, n.id
LIMIT $limit
"""


def all_of_type(with_status: bool) -> str:
    status = ", status: $status" if with_status else ""
    return f"""
MATCH (n:Memory {{{IN_CUBE}, memory_type: $memory_type{status}}})
RETURN {NODE}
ORDER BY n.updated_at DESC, n.id
"""


def page(skip: int, limit: int | None) -> str:
    """SKIP/LIMIT for a sorted read (integers, never user text)."""
    if skip < 0 or (limit is not None and limit < 0):
        raise ValueError(f"a page needs skip >= 0 and limit >= 0, got {skip} and {limit}")
    return f"SKIP {int(skip)}" + ("" if limit is None else f" LIMIT {int(limit)}") + "\n"


def count_by_type(with_status: bool) -> str:
    status = ", status: $status" if with_status else ""
    return f"""
MATCH (n:Memory {{{IN_CUBE}{status}}})
RETURN n.memory_type AS memory_type, count(*) AS count
"""


# -- edges -------------------------------------------------------------------------------

EDGE_COLUMNS = (
    "startNode(r).id AS source, endNode(r).id AS target, type(r) AS type, "
    "r.weight AS weight, r.reason AS reason"
)
CUBE_EDGES = f"""
MATCH (:Memory {{{IN_CUBE}}})-[r]->(:Memory {{cube_id: $cube_id}})
RETURN {EDGE_COLUMNS}
"""
EDGE_TYPES_OF = f"""
MATCH (n:Memory)-[r]-(:Memory {{cube_id: $cube_id}})
WHERE {ANY_OF}
RETURN DISTINCT type(r) AS type
"""
_SOURCE = "node_key: $source_key, cube_id: $cube_id, id: $source"
_TARGET = "node_key: $target_key, cube_id: $cube_id, id: $target"


def add_edges(type_: str) -> str:
    """MERGE one edge per (source, target, type); endpoints missing from the cube are skipped."""
    return f"""
UNWIND $rows AS row
MATCH (a:Memory {{node_key: row.source_key, cube_id: $cube_id, id: row.source}})
MATCH (b:Memory {{node_key: row.target_key, cube_id: $cube_id, id: row.target}})
MERGE (a)-[r:{edge_type(type_)}]->(b)
SET r.weight = row.weight, r.reason = row.reason
RETURN count(r) AS written
"""


def delete_edge(type_: str) -> str:
    return f"""
MATCH (:Memory {{{_SOURCE}}})-[r:{edge_type(type_)}]->(:Memory {{{_TARGET}}})
DELETE r
RETURN count(*) AS deleted
"""


def edge_exists(type_: str, direction: Direction) -> str:
    rel = _pattern(direction, f"r:{edge_type(type_)}")
    return f"""
MATCH (:Memory {{{_SOURCE}}}){rel}(:Memory {{{_TARGET}}})
RETURN count(r) AS found
"""


def existing_edges(type_: str) -> str:
    """Which of ``$rows`` (source, target and their keys) are joined by a ``type_`` edge."""
    return f"""
UNWIND $rows AS row
MATCH (:Memory {{node_key: row.source_key, cube_id: $cube_id, id: row.source}})
      -[r:{edge_type(type_)}]->
      (:Memory {{node_key: row.target_key, cube_id: $cube_id, id: row.target}})
RETURN DISTINCT row.source AS source, row.target AS target
"""


def edges_of(direction: Direction, typed: bool) -> str:
    """Edges touching a node; ``typed`` adds ``type(r) IN $types`` (types as a parameter)."""
    where = "WHERE type(r) IN $types" if typed else ""
    rel = _pattern(direction, "r")
    return f"""
MATCH (:Memory {{{AT_NODE}}}){rel}(:Memory {{cube_id: $cube_id}})
{where}
RETURN {EDGE_COLUMNS}
"""


EDGES_FROM = f"""
MATCH (n:Memory)-[r]->(:Memory {{cube_id: $cube_id}})
WHERE {ANY_OF} AND type(r) IN $types
RETURN {EDGE_COLUMNS}
"""


def redirect_edges(type_: str, outgoing: bool) -> str:
    """Move one type of edge from ``$ids`` onto ``$id`` in one statement.

    Edges whose other end is ``$id`` or another merged node would become self-loops, so
    they are left where they are. The listed nodes are found first (``WITH n``): in one
    pattern, FalkorDB starts an incoming edge at its far end and reads every memory of every
    cube to find them (320-440 ms a statement at 100,000 turns of history).
    """
    t = edge_type(type_)
    if outgoing:
        match_old, merge_new = f"(n)-[r:{t}]->(other:Memory)", f"(dest)-[copy:{t}]->(other)"
    else:
        match_old, merge_new = f"(n)<-[r:{t}]-(other:Memory)", f"(other)-[copy:{t}]->(dest)"
    return f"""
MATCH (n:Memory)
WHERE {ANY_OF}
WITH n
MATCH {match_old}
WHERE other.cube_id = $cube_id AND NOT other.id IN $ids AND other.id <> $id
MATCH (dest:Memory {{{AT_NODE}}})
MERGE {merge_new}
SET copy.weight = r.weight, copy.reason = r.reason
DELETE r
RETURN count(*) AS moved
"""


def subgraph_edges(depth: int) -> str:
    """Every edge on a path of at most ``depth`` hops from the center, all inside the cube."""
    hops = _bounded_int(depth, "depth", 1, 5)
    return f"""
MATCH p = (:Memory {{{AT_NODE}}})-[*1..{hops}]-(:Memory)
WHERE all(x IN nodes(p) WHERE x.cube_id = $cube_id)
UNWIND relationships(p) AS r
WITH DISTINCT r
RETURN {EDGE_COLUMNS}
"""


def nodes_by_tags(where: str) -> str:
    clause = f"WHERE {where}" if where else ""
    return f"""
MATCH (n:Memory {{{IN_CUBE}}})
{clause}
WITH n, size([t IN coalesce(n.tags, []) WHERE t IN $tags]) AS overlap
WHERE overlap >= $min_overlap
RETURN {NODE}
ORDER BY overlap DESC, n.updated_at DESC, n.id DESC
LIMIT $limit
"""


def find_nodes(where: str, limited: bool) -> str:
    clause = f"WHERE {where}" if where else ""
    limit = "LIMIT $limit" if limited else ""
    return f"""
MATCH (n:Memory {{{IN_CUBE}}})
{clause}
RETURN {NODE}
ORDER BY n.updated_at DESC, n.id
{limit}
"""


# The property the full-text index reads (``sinks.graph.fulltext`` writes it on every node).
SEARCH_TEXT = "search_text"


def keyword_ids(dialect: Dialect, where: str) -> str:
    """``keyword_nodes``' ids and scores only."""
    return keyword_nodes(dialect, where).replace(f"RETURN {NODE}, score",
                                                 "RETURN n.id AS id, score")


def keyword_nodes(dialect: Dialect, where: str) -> str:
    """Full-text recall: the cube's activated nodes of the wanted types matching ``$text``,
    best BM25-style score first (ties by id, so the order is deterministic)."""
    if not dialect.fulltext_call:
        raise StoreError(f"the {dialect.name} dialect has no full-text index")
    extra = f" AND {where}" if where else ""
    return f"""
{dialect.fulltext_call}
WITH node AS n, score
WHERE n.cube_key = $cube_key AND n.cube_id = $cube_id AND n.status = 'activated'
  AND n.memory_type IN $memory_types{extra}
RETURN {NODE}, score
ORDER BY score DESC, n.id
LIMIT $limit
"""


def count_by(fields: Sequence[str], where: str) -> tuple[str, list[str]]:
    """Group counts; list fields are unwound (one group per tag). Returns text and aliases."""
    if not fields:
        raise StoreError("count_by needs at least one field")
    unwinds: list[str] = []
    columns: list[str] = []
    aliases: list[str] = []
    for i, field in enumerate(fields):
        if field not in FILTER_FIELDS:
            raise StoreError(f"unknown field {field!r}")
        alias = f"g{i}"
        aliases.append(alias)
        if field in LIST_FIELDS:
            unwinds.append(f"UNWIND coalesce(n.{field}, []) AS {alias}")
            columns.append(alias)
        else:
            columns.append(f"n.{field} AS {alias}")
    clause = f"WHERE {where}" if where else ""
    text = f"""
MATCH (n:Memory {{{IN_CUBE}}})
{clause}
{" ".join(unwinds)}
RETURN {", ".join(columns)}, count(*) AS count
ORDER BY count DESC
"""
    return text, aliases
