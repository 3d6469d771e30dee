"""The embedder port: batched, L2-normalised float32 vectors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

Vectors = npt.NDArray[np.float32]


class EmbedderError(RuntimeError):
    """The embedder failed (endpoint unreachable, bad answer, wrong dimension)."""


class Embedder(Protocol):
    """Passages are what is stored, queries what is searched (e5 models embed them differently)."""

    name: str

    @property
    def dim(self) -> int: ...

    async def embed_passages(self, texts: Sequence[str]) -> Vectors:
        """Shape (len(texts), dim), each row L2-normalised."""
        ...

    async def embed_queries(self, texts: Sequence[str]) -> Vectors: ...

    async def close(self) -> None: ...
