"""Partitions memory embeddings into size-bounded clusters and a topic → concept → fact tree.

Pure and synchronous (numpy + scikit-learn): call it through ``asyncio.to_thread``. About
1 s for 1,500 rows.

Why it looks the way it does — measured on multilingual-e5-small over
``tests/data/three_subjects.json`` (60 memories on three subjects, a third in Chinese):

* Raw e5 cosines are compressed: same-subject pairs average ~0.81, different-subject pairs
  ~0.79, so no fixed similarity threshold separates subjects. The vectors are centred on the
  set's mean and renormalised, which spreads them around zero (same subject ~+0.1,
  different subject ~-0.07).
* The language outweighs the subject: two Chinese memories on different subjects score ~0.90,
  a Chinese and an English one on the same subject ~0.76, and clustering groups by language
  (adjusted Rand index 0.26 against the subjects). Given one language label per row
  (``languages``), the directions from the overall mean to each language's mean are projected
  out first (ARI 0.90).
* Average-linkage agglomerative clustering on cosine distance, with the number of clusters
  chosen by the best silhouette, finds the three subjects (k = 3 scores best). k-means found
  them as well but its result moved with the row order (ARI 0.81–0.95 over shuffles);
  average linkage has no random start, so the same rows give the same clusters in any order.

Contract of ``hierarchy`` (``cluster`` returns its concepts only):

1. The rows are split into top-level groups: the k in [2, ``max_k``] with the best
   silhouette. A set of at most ``max_size`` rows stays one group unless that silhouette
   reaches ``min_silhouette`` (mixed small sets are split, coherent ones are not).
2. A group of at most ``max_size`` rows is a concept. A larger group is a topic: it is split
   again (into the fewest pieces that can fit, recursively) until every piece has at most
   ``max_size`` rows; those pieces are its concepts.
3. Groups smaller than ``min_size`` are left out (``unclustered``): they wait for the next run.

Using it for the optimizer's periodic run: pass the parentless fact-level nodes;
write a ``concept`` summary with ``PARENT`` edges for each concept and a ``topic`` summary over
the concept summaries of each topic. Parentless concept summaries from earlier runs are
not facts: keep them out of that set. Once more than ``max_size`` of them hang below the
root, group them on their own (``cluster(concept_vectors, ...)``) and give each resulting
cluster a topic summary, so the tree stays at most topic → concept → fact. (A handful of
concepts is best left alone: three unrelated ones are too few to split and would become
one meaningless topic.)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from memstream.streams.text.words import is_mostly_chinese

FloatArray = npt.NDArray[np.floating[Any]]
IntArray = npt.NDArray[np.intp]

DEFAULT_MIN_SIZE = 2
DEFAULT_MAX_SIZE = 20
# Best silhouette (cosine, centred vectors) a set of at most max_size rows needs before it is
# split. The three e5 subjects score 0.14 at k = 3; of 39 random mixes of 4–21 of their
# memories (two or three subjects) this threshold split 37. Splitting a coherent set costs
# little (two smaller concepts); one summary over unrelated memories is useless.
DEFAULT_MIN_SILHOUETTE = 0.10
# The largest number of top-level groups tried.
DEFAULT_MAX_K = 12
# k is the smallest whose silhouette is this close to the best: 20 work memories scored
# 0.094 at k = 2 and 0.103 at k = 10 (ten concepts of two), the three subjects 0.141 at k = 3
# and 0.129 at k = 2.
SILHOUETTE_TOLERANCE = 0.01


@dataclass(frozen=True)
class Hierarchy:
    """A topic → concept → fact plan for one set of rows.

    ``concepts``: row indices; each concept has ``min_size``..``max_size`` rows, sorted, and
    the concepts are ordered by their first row. ``topics``: indices into ``concepts``; each
    topic holds at least two concepts, and a concept in no topic hangs below the root.
    ``unclustered``: rows in no concept.
    """

    concepts: list[list[int]] = field(default_factory=list)
    topics: list[list[int]] = field(default_factory=list)
    unclustered: list[int] = field(default_factory=list)

    def topic_rows(self, topic: int) -> list[int]:
        """Every row under one topic."""
        return sorted(row for concept in self.topics[topic] for row in self.concepts[concept])


def language_labels(texts: Sequence[str]) -> list[str]:
    """One label per text (``"zh"`` when mostly Chinese, else ``"en"``), for ``languages=``."""
    return ["zh" if is_mostly_chinese(text) else "en" for text in texts]


def centroid_of(vectors: FloatArray) -> FloatArray:
    """The unit mean of unit row vectors."""
    mean = np.asarray(vectors, dtype=np.float64).mean(axis=0)
    return np.asarray(mean / max(float(np.linalg.norm(mean)), 1e-12), dtype=np.float64)


def centrality(vectors: FloatArray) -> list[float]:
    """Each row's cosine to the rows' centroid (rows are unit vectors): how well it stands for
    the whole group, so an extractive summary can quote the most central members."""
    return [float(x) for x in np.asarray(vectors, dtype=np.float64) @ centroid_of(vectors)]


def cluster(
    vectors: FloatArray,
    *,
    min_size: int = DEFAULT_MIN_SIZE,
    max_size: int = DEFAULT_MAX_SIZE,
    languages: Sequence[str] | None = None,
    min_silhouette: float = DEFAULT_MIN_SILHOUETTE,
    max_k: int = DEFAULT_MAX_K,
) -> list[list[int]]:
    """Clusters of row indices, ``min_size``..``max_size`` rows each; smaller groups left out."""
    return hierarchy(
        vectors,
        min_size=min_size,
        max_size=max_size,
        languages=languages,
        min_silhouette=min_silhouette,
        max_k=max_k,
    ).concepts


def hierarchy(
    vectors: FloatArray,
    *,
    min_size: int = DEFAULT_MIN_SIZE,
    max_size: int = DEFAULT_MAX_SIZE,
    languages: Sequence[str] | None = None,
    min_silhouette: float = DEFAULT_MIN_SILHOUETTE,
    max_k: int = DEFAULT_MAX_K,
) -> Hierarchy:
    """Concepts of at most ``max_size`` rows and the topics that group them (module docstring).

    ``vectors``: shape (n, dim), one embedding per candidate node. ``languages``: optional
    label per row (``language_labels``); pass it whenever the texts may mix languages.
    """
    data = _validated(vectors, languages, min_size, max_size, max_k)
    n = data.shape[0]
    if n < min_size:
        return Hierarchy(unclustered=list(range(n)))
    langs = None if languages is None else np.asarray(languages, dtype=str)
    splitter = _Splitter(data, langs, min_size, max_size, min_silhouette)
    small = n <= max_size
    top = splitter.split(np.arange(n), k_lo=1 if small else 2, k_hi=min(max_k, n // min_size),
                         floor=small)
    concepts: list[list[int]] = []
    topic_pieces: list[list[list[int]]] = []
    for group in top:
        pieces = [sorted(int(i) for i in p) for p in splitter.split_to_size(group)]
        pieces = [p for p in pieces if len(p) >= min_size]
        if len(group) > max_size and len(pieces) >= 2:
            topic_pieces.append(pieces)
        concepts.extend(pieces)
    concepts.sort(key=lambda c: c[0])
    position = {c[0]: i for i, c in enumerate(concepts)}
    topics = sorted(sorted(position[p[0]] for p in pieces) for pieces in topic_pieces)
    placed = {i for c in concepts for i in c}
    return Hierarchy(
        concepts=concepts,
        topics=topics,
        unclustered=[i for i in range(n) if i not in placed],
    )


def _validated(
    vectors: FloatArray,
    languages: Sequence[str] | None,
    min_size: int,
    max_size: int,
    max_k: int,
) -> FloatArray:
    if min_size < 1:
        raise ValueError("min_size must be at least 1")
    if max_size < max(2, min_size):
        raise ValueError("max_size must be at least 2 and at least min_size")
    if max_k < 2:
        raise ValueError("max_k must be at least 2")
    data = np.asarray(vectors, dtype=np.float64)
    if data.ndim != 2:
        raise ValueError(f"vectors must be 2-dimensional, got shape {data.shape}")
    if not np.isfinite(data).all():
        raise ValueError("vectors contain NaN or infinite values")
    if languages is not None and len(languages) != data.shape[0]:
        raise ValueError(
            f"languages has {len(languages)} labels for {data.shape[0]} rows; need one per row"
        )
    return data


class _Splitter:
    """Average-linkage partitions of subsets of the rows, k chosen by silhouette."""

    def __init__(
        self,
        data: FloatArray,
        languages: npt.NDArray[np.str_] | None,
        min_size: int,
        max_size: int,
        min_silhouette: float,
    ) -> None:
        self.data = data
        self.languages = languages
        self.min_size = min_size
        self.max_size = max_size
        self.min_silhouette = min_silhouette

    def split_to_size(self, rows: IntArray) -> list[IntArray]:
        """``rows`` cut until every piece has at most ``max_size`` rows."""
        if len(rows) <= self.max_size:
            return [rows]
        k_lo = max(2, math.ceil(len(rows) / self.max_size))
        # Within one topic the silhouette is nearly flat over k (e5: 0.126 at k = 2, 0.131 at
        # k = 8 for 21 food memories), so only the fewest pieces that can fit are tried.
        k_hi = max(k_lo, min(k_lo + 1, len(rows) // self.min_size))
        out: list[IntArray] = []
        for piece in self.split(rows, k_lo=k_lo, k_hi=k_hi, floor=False):
            out.extend(self.split_to_size(piece))
        return out

    def split(self, rows: IntArray, *, k_lo: int, k_hi: int, floor: bool) -> list[IntArray]:
        """The best partition of ``rows`` into k in [max(2, k_lo), k_hi] groups, largest first.

        The rows stay together when ``k_lo`` is 1 and either no split is possible or (with
        ``floor``) the best silhouette is below ``min_silhouette``. Rows that cannot be told
        apart (identical vectors) but must be split are cut into even chunks.
        """
        n = len(rows)
        candidates = range(max(2, k_lo), min(k_hi, n - 1) + 1)
        if not candidates or np.ptp(self.data[rows], axis=0).max() < 1e-9:
            if k_lo <= 1:
                return [rows]
            return _even_chunks(rows, max(k_lo, math.ceil(n / self.max_size)))
        # scikit-learn (and the scipy it pulls in) costs ~2.6 s of CPU to import: loaded at
        # the first split, off the worker's start (`memstream up` waits for that start).
        from sklearn.cluster import AgglomerativeClustering
        from sklearn.metrics import silhouette_score

        points = self._prepared(rows)
        distances = np.clip(1.0 - points @ points.T, 0.0, 2.0)
        np.fill_diagonal(distances, 0.0)
        scored: list[tuple[float, npt.NDArray[np.int_]]] = []
        for k in candidates:
            labels = AgglomerativeClustering(
                n_clusters=k, metric="precomputed", linkage="average"
            ).fit_predict(distances)
            score = float(silhouette_score(distances, labels, metric="precomputed"))
            scored.append((score, labels))
        best = max(score for score, _ in scored)
        if floor and k_lo <= 1 and best < self.min_silhouette:
            return [rows]
        # The fewest groups scoring close to the best: silhouettes of small sets are flat over k.
        chosen = next(labels for score, labels in scored if score >= best - SILHOUETTE_TOLERANCE)
        groups = [rows[chosen == label] for label in np.unique(chosen)]
        return sorted(groups, key=lambda g: (-len(g), int(g.min())))

    def _prepared(self, rows: IntArray) -> FloatArray:
        """The rows' vectors with per-language offsets projected out, centred, L2-normalised."""
        raw = self.data[rows]
        mean = raw.mean(axis=0)
        points = raw - mean
        if self.languages is not None:
            langs = self.languages[rows]
            labels, counts = np.unique(langs, return_counts=True)
            # A language with one row has no offset to speak of: its "mean" is that memory.
            kept = [label for label, count in zip(labels, counts, strict=True) if count >= 2]
            if len(kept) >= 2:
                offsets = np.stack([raw[langs == label].mean(axis=0) - mean for label in kept])
                basis, _ = np.linalg.qr(offsets.T)
                points = points - (points @ basis) @ basis.T
        norms = np.linalg.norm(points, axis=1, keepdims=True)
        return np.asarray(points / np.where(norms > 1e-12, norms, 1.0), dtype=np.float64)


def _even_chunks(rows: IntArray, k: int) -> list[IntArray]:
    return [part for part in np.array_split(np.sort(rows), k) if len(part)]
