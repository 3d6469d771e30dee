"""Pick the GraphStore adapter once, from ``settings.graph.backend``."""

from __future__ import annotations

from typing import assert_never

from memstream.sinks.graph.falkordb import FalkorDBGraphStore
from memstream.sinks.graph.memory import InMemoryGraphStore
from memstream.sinks.graph.neo4j import Neo4jGraphStore
from memstream.sinks.ports import GraphStore
from memstream.topics.settings import Settings


def create_graph_store(settings: Settings, uri: str) -> GraphStore:
    """The configured graph store at ``uri`` (the embedded server's URI or ``settings.graph.uri``).

    FalkorDB keeps every cube in one graph named ``settings.graph.database``; Neo4j uses that
    name as the database (Neo4j Community has only ``neo4j``).
    """
    graph = settings.graph
    match graph.backend:
        case "falkordb":
            return FalkorDBGraphStore(uri, graph.database)
        case "memory":  # a test double: this process only, gone when it stops
            return InMemoryGraphStore()
        case "neo4j":
            password = graph.password.get_secret_value() if graph.password is not None else None
            return Neo4jGraphStore(uri, graph.username, password, graph.database)
        case _:
            assert_never(graph.backend)
