"""The embedder factory (streams/embed/factory.py): the local embedder by default."""

from __future__ import annotations

import pytest

from memstream.streams.embed.factory import create_embedder
from memstream.streams.embed.inflight import SharedInFlight
from memstream.streams.embed.local import LocalEmbedder
from memstream.streams.embed.port import EmbedderError
from memstream.topics.settings import EmbedderSettings


def test_factory_builds_the_local_embedder() -> None:
    embedder = create_embedder(EmbedderSettings())
    assert isinstance(embedder, SharedInFlight) and isinstance(embedder.inner, LocalEmbedder)
    assert embedder.dim == 384
    with pytest.raises(EmbedderError, match="384"):
        create_embedder(EmbedderSettings(provider="local", dimensions=768))
