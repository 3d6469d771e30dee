"""What a user would build instead of memstream, and the measures both are judged by.

Baselines over the same 5-turn chunks memstream ingests (each chunk: its date, then one
``Speaker: text`` line per turn) and over single turns: dense (cosine of e5 embeddings), BM25
(Okapi, lowercase words) and their reciprocal-rank fusion (k = 60). A hit is the turns it
cites and the characters it returns; recall counts a question's evidence turns among the
cited turns of the first k hits, or of the hits taken in rank order while their text fits
in a budget of characters.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

RRF_K = 60
KS = (1, 5, 10, 20)
BUDGETS = (1000, 2000, 6000)


@dataclass(frozen=True)
class Hit:
    """One returned result: the turn ids whose words it returns, and its length."""

    turns: frozenset[str]
    chars: int


@dataclass(frozen=True)
class Unit:
    """A retrievable text of a baseline (a chunk or a turn) and the turns it holds."""

    text: str
    turns: frozenset[str]


def recall_at(hits: Sequence[Hit], evidence: frozenset[str], k: int) -> float:
    found: set[str] = set()
    for hit in hits[:k]:
        found |= hit.turns
    return len(evidence & found) / len(evidence)


def recall_within(hits: Sequence[Hit], evidence: frozenset[str], budget: int) -> float:
    """Recall of the hits taken in rank order while their text fits in ``budget`` chars."""
    found: set[str] = set()
    used = 0
    for hit in hits:
        if used + hit.chars > budget:
            break
        used += hit.chars
        found |= hit.turns
    return len(evidence & found) / len(evidence)


def chars_at(hits: Sequence[Hit], k: int) -> int:
    return sum(h.chars for h in hits[:k])


_WORD = re.compile(r"\w+")


def bm25_words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


class BM25:
    """Okapi BM25 (k1 1.5, b 0.75) over a small corpus."""

    def __init__(self, docs: Sequence[str], k1: float = 1.5, b: float = 0.75) -> None:
        self.tf = [Counter(bm25_words(d)) for d in docs]
        self.lens = np.asarray([sum(t.values()) for t in self.tf], dtype=np.float64)
        self.avg = float(self.lens.mean()) if len(docs) else 1.0
        df: Counter[str] = Counter()
        for t in self.tf:
            df.update(t.keys())
        n = len(docs)
        self.idf = {w: math.log(1 + (n - f + 0.5) / (f + 0.5)) for w, f in df.items()}
        self.k1, self.b = k1, b

    def scores(self, query: str) -> np.ndarray:
        out = np.zeros(len(self.tf))
        norm = self.k1 * (1 - self.b + self.b * self.lens / self.avg)
        for w in set(bm25_words(query)):
            idf = self.idf.get(w)
            if idf is None:
                continue
            f = np.asarray([t.get(w, 0) for t in self.tf], dtype=np.float64)
            out += idf * f * (self.k1 + 1) / (f + norm)
        return out


def ranking(scores: np.ndarray) -> list[int]:
    return [int(i) for i in np.argsort(-scores, kind="stable")]


def rrf(*rankings: Sequence[int], k: int = RRF_K) -> list[int]:
    fused: dict[int, float] = {}
    for ranked in rankings:
        for rank, i in enumerate(ranked, start=1):
            fused[i] = fused.get(i, 0.0) + 1.0 / (k + rank)
    return sorted(fused, key=lambda i: (-fused[i], i))


@dataclass
class Baselines:
    """Dense, BM25 and hybrid rankings of a list of units for each query."""

    units: Sequence[Unit]
    vectors: np.ndarray  # e5 passage embeddings of the units, L2-normalised
    bm25: BM25

    def hits(self, order: Sequence[int], depth: int) -> list[Hit]:
        return [Hit(self.units[i].turns, len(self.units[i].text)) for i in order[:depth]]

    def rank(self, query: str, query_vec: np.ndarray, depth: int) -> dict[str, list[Hit]]:
        dense = ranking(self.vectors @ query_vec)
        sparse = ranking(self.bm25.scores(query))
        return {"dense": self.hits(dense, depth), "bm25": self.hits(sparse, depth),
                "hybrid": self.hits(rrf(dense, sparse), depth)}
