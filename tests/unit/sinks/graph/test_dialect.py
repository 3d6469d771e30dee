"""The graph dialects (sinks/graph/dialect.py): the schema statements of Neo4j and FalkorDB."""

from __future__ import annotations

from memstream.sinks.graph import cypher


def test_neo4j_ddl_is_idempotent_and_named() -> None:
    for key, statement in cypher.NEO4J.schema:
        assert statement.startswith(("CREATE CONSTRAINT ", "CREATE INDEX ",
                                     "CREATE FULLTEXT INDEX "))
        others = {"cube_access": "CubeAccess", "llm_spend": "LLMSpend", "llm_answer": "LLMAnswer",
                  "cube_use": "CubeUse"}
        label = "LogRef" if key.startswith("log_ref_") else others.get(key, "Memory")
        assert f" {key} IF NOT EXISTS FOR (n:{label}) " in statement
    assert cypher.NEO4J.indexed_properties is None
    assert "memory_search_text" in cypher.NEO4J.fulltext_call
    for key, statement in cypher.FALKORDB.schema:
        if key == cypher.SEARCH_TEXT:  # the full-text index, by procedure
            assert statement == "CALL db.idx.fulltext.createNodeIndex('Memory', 'search_text')"
        elif "." in key:  # another label's index, listed as label.property
            label, prop = key.split(".")
            assert statement == f"CREATE INDEX FOR (n:{label}) ON (n.{prop})"
        else:
            assert statement == f"CREATE INDEX FOR (n:Memory) ON (n.{key})"
    assert cypher.FALKORDB.indexed_properties is not None
