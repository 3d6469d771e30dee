"""What differs between the Cypher of Neo4j 5 and of FalkorDB, in one place.

``sinks.graph.cypher`` writes every query once in the subset both engines accept; a ``Dialect``
carries only what cannot be shared (index DDL, one FalkorDB index bug to steer around).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from memstream.sinks.log_refs import FALKORDB_SCHEMA as FALKORDB_LOG_REFS
from memstream.sinks.log_refs import NEO4J_SCHEMA as NEO4J_LOG_REFS


@dataclass(frozen=True, slots=True)
class Dialect:
    """What differs between Neo4j 5 and FalkorDB for our queries.

    Avoided rather than switched (both engines run the same text):
    - ``datetime()`` (FalkorDB has none): times are ISO-8601 UTC strings of fixed width;
    - ``elementId()`` / ``id()``: nodes are addressed by our own ``id`` within a cube;
    - ``EXISTS {}`` / ``COUNT {}`` subqueries (FalkorDB has none): a path pattern
      predicate such as ``NOT (:Memory)-[:PARENT]->(n)``, valid in both;
    - ``[rs*1..2]`` as a list of relationships (FalkorDB binds a path): ``relationships(p)``;
    - maps as property values (both reject them): JSON strings;
    - dynamic relationship types (``$(type)`` is Neo4j 5.26+ only): one query per type,
      the type taken from the ``EDGE_TYPES`` whitelist.
    """

    name: str
    # (key, DDL statement) pairs, run one at a time by ``ensure_schema``.
    schema: tuple[tuple[str, str], ...]
    # For engines without ``IF NOT EXISTS``: a query returning the ``properties`` already
    # indexed on ``Memory``; statements whose key is among them are skipped.
    indexed_properties: str | None = None
    # How a string property is written on the left of < / <= / > / >= in a filter.
    string_range: str = "{}"
    # Full-text (keyword) recall: the procedure call yielding ``node`` and ``score`` for the
    # query parameter ``$text``, and the query syntax ``sinks.graph.fulltext`` writes for it.
    fulltext_call: str = ""
    fulltext_syntax: Literal["redisearch", "lucene"] = "lucene"


NEO4J: Final = Dialect(
    name="neo4j",
    schema=(
        # Uniqueness also gives the index every MERGE / MATCH of one node uses.
        (
            "memory_node_key",
            "CREATE CONSTRAINT memory_node_key IF NOT EXISTS "
            "FOR (n:Memory) REQUIRE n.node_key IS UNIQUE",
        ),
        ("memory_cube", "CREATE INDEX memory_cube IF NOT EXISTS FOR (n:Memory) ON (n.cube_key)"),
        (
            "memory_cube_type",
            "CREATE INDEX memory_cube_type IF NOT EXISTS "
            "FOR (n:Memory) ON (n.cube_key, n.memory_type, n.status)",
        ),
        # Words arrive tokenized (sinks.graph.fulltext), so the analyzer only splits on spaces.
        (
            "memory_search_text",
            "CREATE FULLTEXT INDEX memory_search_text IF NOT EXISTS FOR (n:Memory) "
            "ON EACH [n.search_text] OPTIONS {indexConfig: {`fulltext.analyzer`: 'whitespace'}}",
        ),
        # cube access records and the LLM budget ledger, looked up per request / per cube
        ("cube_access", "CREATE INDEX cube_access IF NOT EXISTS FOR (n:CubeAccess) ON (n.cube_id)"),
        ("llm_spend", "CREATE INDEX llm_spend IF NOT EXISTS FOR (n:LLMSpend) ON (n.cube_id)"),
        ("cube_use", "CREATE INDEX cube_use IF NOT EXISTS FOR (n:CubeUse) ON (n.cube_id)"),
        *NEO4J_LOG_REFS,  # where a cube's records sit in the log (sinks/log_refs.py)
        ("llm_answer", "CREATE INDEX llm_answer IF NOT EXISTS FOR (n:LLMAnswer) ON (n.call)"),
    ),
    fulltext_call="CALL db.index.fulltext.queryNodes('memory_search_text', $text) "
    "YIELD node, score",
    fulltext_syntax="lucene",
)

# FalkorDB: no IF NOT EXISTS and no index names (a repeat fails with "already indexed",
# which its Bolt endpoint reports only as "unknown error"), so existing indexes are listed
# first. Single-property range indexes; the planner picks the most selective.
_FALKORDB_INDEXED = ("node_key", "cube_key", "memory_type", "status")
FALKORDB: Final = Dialect(
    name="falkordb",
    schema=(
        *((p, f"CREATE INDEX FOR (n:Memory) ON (n.{p})") for p in _FALKORDB_INDEXED),
        # RediSearch underneath: English stemming and stopwords; words arrive tokenized.
        ("search_text", "CALL db.idx.fulltext.createNodeIndex('Memory', 'search_text')"),
        # cube access records and the LLM budget ledger, looked up per request / per cube
        ("CubeAccess.cube_id", "CREATE INDEX FOR (n:CubeAccess) ON (n.cube_id)"),
        ("LLMSpend.cube_id", "CREATE INDEX FOR (n:LLMSpend) ON (n.cube_id)"),
        ("CubeUse.cube_id", "CREATE INDEX FOR (n:CubeUse) ON (n.cube_id)"),
        *FALKORDB_LOG_REFS,  # where a cube's records sit in the log (sinks/log_refs.py)
        ("LLMAnswer.call", "CREATE INDEX FOR (n:LLMAnswer) ON (n.call)"),
    ),
    fulltext_call="CALL db.idx.fulltext.queryNodes('Memory', $text) YIELD node, score",
    fulltext_syntax="redisearch",
    indexed_properties=(
        "CALL db.indexes() YIELD label, properties RETURN CASE label WHEN 'Memory' THEN "
        "properties ELSE [p IN properties | label + '.' + p] END AS properties"
    ),
    # FalkorDB 4.16.3 answers `n.p < $x` / `n.p <= $x` with every node when a range index
    # on a string property serves it (> and >= are right). An expression is not served by
    # the index, so string ranges compare toString(n.p) instead.
    string_range="toString({})",
)
