"""Fixtures of the store contract suites (each adapter runs the same tests)."""

from tests.contract.graph_fixtures import (  # noqa: F401
    cube,
    falkordb_graph_store,
    graph_bolt_server,
    graph_falkordb_server,
    graph_store,
    neo4j_bolt_graph_store,
)
from tests.contract.vector_fixtures import (  # noqa: F401
    memory_store,
    memory_vector_uri,
    milvus_lite_uri,
    vector_backend,
    vector_collection,
    vector_store,
    vector_uri,
)
