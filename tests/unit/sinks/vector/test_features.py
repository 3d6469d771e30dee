"""What the Milvus adapter does on each server version (decided from the server, not the URI)."""

from __future__ import annotations

import pytest

from memstream.sinks.vector.features import ServerFeatures


@pytest.mark.parametrize(
    ("version", "templates", "partition_key"),
    [
        ("v2.3.5-lite", False, False),  # the `milvus` package's standalone (tests)
        ("v2.3.21", False, False),
        ("v2.4.0", False, True),
        ("v2.5.4", True, True),
        ("2.6.0-rc1", True, True),
        ("v3.0.0", True, True),
        ("unknown", False, False),  # the conservative path works everywhere
        ("", False, False),
    ],
)
def test_features_follow_the_server_version(
    version: str, templates: bool, partition_key: bool
) -> None:
    features = ServerFeatures.from_version(version)
    assert (features.templates, features.partition_key) == (templates, partition_key)
