"""Fixtures shared by every test folder: one broker, one FalkorDB (and a Milvus server when
asked for) per session."""

pytest_plugins = [
    "tests.fakes.fixtures",
    "tests.stream.broker_fixtures",
    "tests.support.pipeline",
    "tests.support.milvus_fixtures",
]
