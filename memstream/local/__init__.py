"""Launchers of the embedded services (broker, FalkorDB, Milvus server) and process helpers."""
