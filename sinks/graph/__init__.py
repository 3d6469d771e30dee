"""GraphStore adapters: the Cypher shared by Neo4j and FalkorDB, and an in-memory double."""
