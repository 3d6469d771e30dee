"""Embeddings from any OpenAI-compatible ``/v1/embeddings`` endpoint.

Answers are checked (count, dimension, finite values) and re-normalised, since
not every server returns unit vectors, and the vector store relies on them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import openai
from openai import AsyncOpenAI

from memstream.streams.embed.port import EmbedderError, Vectors
from memstream.streams.llm.openai_client import openai_client, status_message
from memstream.topics.settings import EmbedderSettings

log = logging.getLogger(__name__)

_PERMANENT_STATUS = frozenset({400, 401, 403, 404, 405, 413, 422})


class _Retryable(Exception):
    pass


class OpenAIEmbedder:
    """Batched by ``settings.batch_size``; dimension fixed by settings or by the first answer."""

    name = "openai"

    def __init__(self, settings: EmbedderSettings, *, client: AsyncOpenAI | None = None) -> None:
        self._settings = settings
        self._client = client or openai_client(settings.base_url, settings.api_key,
                                               settings.timeout_s)
        self._dim: int | None = settings.dimensions
        self.calls = 0
        self.failures = 0

    @property
    def dim(self) -> int:
        """Known once configured or after the first answer; see ``probe``."""
        if self._dim is None:
            raise EmbedderError(
                "embedding dimension is unknown until the endpoint has answered once: set "
                "embedder.dimensions or call `await embedder.probe()` first"
            )
        return self._dim

    async def probe(self) -> int:
        """The dimension, asking the endpoint with a one-word passage if not known yet."""
        if self._dim is None:
            await self.embed_passages(["dimension probe"])
        return self.dim

    async def embed_passages(self, texts: Sequence[str]) -> Vectors:
        return await self._embed(texts, "passage")

    async def embed_queries(self, texts: Sequence[str]) -> Vectors:
        return await self._embed(texts, "query")

    async def close(self) -> None:
        await self._client.close()

    async def _embed(self, texts: Sequence[str], kind: Literal["passage", "query"]) -> Vectors:
        if isinstance(texts, str):
            raise TypeError("pass a sequence of texts, not a single string")
        if not texts:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        size = self._settings.batch_size
        parts = [
            await self._batch(list(texts[start : start + size]), kind)
            for start in range(0, len(texts), size)
        ]
        return np.vstack(parts)

    async def _batch(self, batch: list[str], kind: Literal["passage", "query"]) -> Vectors:
        attempts = self._settings.max_retries + 1
        reason = ""
        for attempt in range(1, attempts + 1):
            if attempt > 1:
                await asyncio.sleep(self._settings.backoff_s * 2 ** (attempt - 2))
            try:
                return self._check(await self._request(batch, kind), len(batch))
            except _Retryable as exc:
                reason = str(exc)
                self.failures += 1
                log.warning("embedding attempt %d/%d failed: %s", attempt, attempts, reason)
        raise EmbedderError(f"embedding failed after {attempts} attempt(s): {reason}")

    async def _request(self, batch: list[str], kind: Literal["passage", "query"]) -> Any:
        extra: dict[str, Any] = {}
        if self._settings.dimensions is not None:
            extra["dimensions"] = self._settings.dimensions
        if self._settings.send_input_type:
            extra["extra_body"] = {"input_type": kind}
        timeout = self._settings.timeout_s
        self.calls += 1
        try:
            async with asyncio.timeout(timeout):
                return await self._client.embeddings.create(
                    model=self._settings.model, input=batch, timeout=timeout, **extra
                )
        except (TimeoutError, openai.APITimeoutError) as exc:
            raise _Retryable(f"no answer within {timeout:g} s") from exc
        except openai.APIStatusError as exc:
            message = f"HTTP {exc.status_code}: {status_message(exc)}"
            if exc.status_code in _PERMANENT_STATUS:
                self.failures += 1
                raise EmbedderError(f"embedding request rejected: {message}") from exc
            raise _Retryable(message) from exc
        except openai.APIConnectionError as exc:
            raise _Retryable(f"cannot reach {self._settings.base_url}: {exc}") from exc
        except openai.APIError as exc:
            raise _Retryable(f"API error: {exc}") from exc

    def _check(self, response: Any, expected: int) -> Vectors:
        data = sorted(response.data, key=lambda item: item.index)
        if len(data) != expected:
            self.failures += 1
            raise EmbedderError(f"asked for {expected} embeddings, got {len(data)}")
        try:
            vectors = np.asarray([item.embedding for item in data], dtype=np.float32)
        except (TypeError, ValueError) as exc:
            self.failures += 1
            raise EmbedderError(f"embeddings of unequal length or not numbers: {exc}") from exc
        if vectors.ndim != 2 or vectors.shape[1] == 0:
            self.failures += 1
            raise EmbedderError(f"unexpected embedding shape {vectors.shape}")
        dim = int(vectors.shape[1])
        if self._dim is None:
            self._dim = dim
        elif dim != self._dim:
            self.failures += 1
            raise EmbedderError(
                f"inconsistent embedding dimension: expected {self._dim}, got {dim}"
            )
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        if not np.all(np.isfinite(vectors)) or np.any(norms == 0):
            self.failures += 1
            raise EmbedderError("the endpoint returned a zero or non-finite embedding")
        return np.asarray(vectors / norms, dtype=np.float32)
