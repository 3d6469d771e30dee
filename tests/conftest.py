"""Fixtures shared by every test folder: one broker and one FalkorDB per session."""

pytest_plugins = [
    "tests.fakes.fixtures",
    "tests.stream.broker_fixtures",
    "tests.support.pipeline",
]
