"""VectorStore adapters: Milvus (Lite file or server), a per-cube cache, an in-memory double."""
