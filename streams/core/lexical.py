"""Okapi BM25 over stemmed words, for ranking turns and episodes inside the search stage.

The graph store's full-text index recalls by words but scores with its own TF-IDF and
no stemming ("painting" never meets "paint"); on LoCoMo, BM25 over stemmed words lifted
chunk recall@10 from 0.823 to 0.855 (bench/retrieval_quality.py). Words come from
``sinks.graph.fulltext.words`` (stopwords out, Chinese segmented), Latin ones Snowball-stemmed.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from functools import lru_cache

import numpy as np
import simplemma
import snowballstemmer

from memstream.sinks.graph.fulltext import words
from memstream.streams.runtime.foreground import paced

_lock = threading.Lock()
_stemmer = snowballstemmer.stemmer("english")


@lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    """An English word's lemma, stemmed ("chose" -> "choos", as "choose"; "bought" -> "buy"):
    a question asks in the present what was told in the past tense, and no stemmer maps an
    irregular form to its base."""
    if not word.isascii() or not word.isalpha():
        return word
    # lower case: the lemma of a name of a day or month is capitalised ("wednesday" ->
    # "Wednesday"), of its plural not ("wednesdays" -> "wednesday"), and the two must meet
    lemma = simplemma.lemmatize(word, lang="en").lower()
    with _lock:  # the Snowball stemmer keeps state between calls
        return str(_stemmer.stemWord(lemma if lemma.isascii() and lemma.isalpha() else word))


def warm() -> None:
    """Load the lemma dictionary now (about 0.3 s), not on the first search that needs it."""
    _stem("went")


def terms(text: str) -> list[str]:
    """The stemmed index words of ``text``, repeats kept."""
    return [_stem(w) for w in words(text)]


class BM25:
    """Okapi BM25 (k1 1.2, b 0.75) over documents given as term lists."""

    def __init__(self, docs: Sequence[Sequence[str]], k1: float = 1.2, b: float = 0.75,
                 pause: Callable[[], None] | None = None) -> None:
        """``pause``: called every ``PAUSE_EVERY`` documents (a background build's turn to
        let searches go first)."""
        step = paced(pause)
        building: dict[str, list[tuple[int, int]]] = {}
        lengths = np.asarray([len(d) for d in docs], dtype=np.float64)
        for i, doc in enumerate(docs):
            step()
            for term, count in Counter(doc).items():
                building.setdefault(term, []).append((i, count))
        # Per term, its documents and counts as one slice of two arrays shared by every term
        # (compressed rows): an index lives as long as its cube's searches, and arrays are
        # nothing the cyclic collector walks, where a list of pairs per term was an object it
        # walked in every full pass (thousands per cube). Two arrays of its own cost a term
        # ~280 bytes of headers, more than most terms' postings (a cube's episode index at
        # 600 turns: 4.2 MB -> 1.3 MB, 0.9 MB of it the episodes themselves).
        self._term = {t: n for n, t in enumerate(building)}
        sizes = np.fromiter((len(p) for p in building.values()), dtype=np.int64,
                            count=len(building))
        self._starts = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
        total = int(self._starts[-1])
        self._docs = np.fromiter((i for p in building.values() for i, _ in p), dtype=np.int32,
                                 count=total)
        self._counts = np.fromiter((c for p in building.values() for _, c in p),
                                   dtype=np.float64, count=total)
        n = len(docs)
        self.size = n
        avg = float(lengths.mean()) if n and lengths.sum() else 1.0
        self.norm = k1 * (1 - b + b * lengths / avg)
        self.k1 = k1
        self._idf = np.fromiter((math.log(1 + (n - len(p) + 0.5) / (len(p) + 0.5))
                                 for p in building.values()), dtype=np.float64,
                                count=len(building))

    def scores(self, query_terms: Sequence[str]) -> np.ndarray:
        """Each document's score for the distinct ``query_terms`` (0 where none occurs)."""
        out = np.zeros(self.size)
        for term in dict.fromkeys(query_terms):
            t = self._term.get(term)
            if t is None:
                continue
            start, end = self._starts[t], self._starts[t + 1]
            rows, freq = self._docs[start:end], self._counts[start:end]
            out[rows] += self._idf[t] * freq * (self.k1 + 1) / (freq + self.norm[rows])
        return out
