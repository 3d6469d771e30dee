"""Fixtures of the store contract suites (each adapter runs the same tests)."""

from tests.contract.vector_fixtures import (  # noqa: F401
    milvus_lite_uri,
    vector_backend,
    vector_collection,
    vector_store,
)
