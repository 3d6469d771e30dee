"""Clustering for the optimizer's periodic run, on real multilingual-e5-small embeddings."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pytest

from memstream.streams.embed.local import LocalEmbedder
from memstream.streams.reorganize.clustering import Hierarchy, cluster, hierarchy, language_labels
from tests.support.paths import DATA

SUBJECTS_FILE = DATA / "three_subjects.json"


@dataclass(frozen=True)
class Corpus:
    texts: list[str]
    subjects: list[str]
    vectors: np.ndarray
    languages: list[str]


@pytest.fixture(scope="module")
async def corpus() -> Corpus:
    """The 60 memories of tests/data/three_subjects.json, embedded once as e5 passages."""
    subjects = json.loads(SUBJECTS_FILE.read_text(encoding="utf-8"))["subjects"]
    texts = [t for items in subjects.values() for t in items]
    labels = [name for name, items in subjects.items() for _ in items]
    vectors = await LocalEmbedder().embed_passages(texts)
    return Corpus(texts, labels, vectors, language_labels(texts))


def majority(rows: list[int], labels: list[str]) -> tuple[str, int]:
    return Counter(labels[i] for i in rows).most_common(1)[0]


def purity(clusters: list[list[int]], labels: list[str]) -> float:
    """Share of clustered rows whose cluster's majority subject is their own."""
    clustered = sum(len(c) for c in clusters)
    return sum(majority(c, labels)[1] for c in clusters) / clustered


def coverage(clusters: list[list[int]], labels: list[str], subject: str) -> float:
    """Share of a subject's rows that sit in a cluster whose majority is that subject."""
    total = labels.count(subject)
    return sum(
        sum(1 for i in c if labels[i] == subject)
        for c in clusters if majority(c, labels)[0] == subject
    ) / total


def test_the_data_set_is_three_subjects_of_twenty_with_chinese_in_each() -> None:
    subjects = json.loads(SUBJECTS_FILE.read_text(encoding="utf-8"))["subjects"]
    assert {k: len(v) for k, v in subjects.items()} == {"food": 20, "travel": 20, "work": 20}
    for items in subjects.values():
        assert 5 <= language_labels(items).count("zh") <= 10
        assert len(set(items)) == 20


def test_memories_are_grouped_by_subject(corpus: Corpus) -> None:
    clusters = cluster(corpus.vectors, languages=corpus.languages)
    assert all(2 <= len(c) <= 20 for c in clusters)
    assert purity(clusters, corpus.subjects) >= 0.9
    for c in clusters:
        # no cluster is a mix: a clear majority of one subject in each
        assert majority(c, corpus.subjects)[1] / len(c) >= 0.75, [corpus.texts[i] for i in c]
    for subject in ("food", "travel", "work"):
        assert coverage(clusters, corpus.subjects, subject) >= 0.8, subject
    # every row is in at most one cluster
    rows = [i for c in clusters for i in c]
    assert len(rows) == len(set(rows))


def test_language_labels_keep_chinese_memories_with_their_subject(corpus: Corpus) -> None:
    chinese = [i for i, lang in enumerate(corpus.languages) if lang == "zh"]
    with_labels = cluster(corpus.vectors, languages=corpus.languages)
    placed = {i: majority(c, corpus.subjects)[0] for c in with_labels for i in c}
    right = sum(1 for i in chinese if placed.get(i) == corpus.subjects[i])
    assert right / len(chinese) >= 0.8
    # Without them e5 groups the Chinese memories together, whatever their subject.
    without = cluster(corpus.vectors)
    mixed = [c for c in without if majority(c, corpus.subjects)[1] / len(c) < 0.5]
    assert mixed and all(corpus.languages[i] == "zh" for c in mixed for i in c)


def test_large_subjects_become_topics_of_small_concepts(corpus: Corpus) -> None:
    tree = hierarchy(corpus.vectors, languages=corpus.languages, max_size=8)
    assert all(2 <= len(c) <= 8 for c in tree.concepts)
    assert purity(tree.concepts, corpus.subjects) >= 0.9
    assert len(tree.topics) == 3
    topic_subjects = set()
    for t, concepts in enumerate(tree.topics):
        assert len(concepts) >= 2
        rows = tree.topic_rows(t)
        subject, count = majority(rows, corpus.subjects)
        assert count / len(rows) >= 0.9
        topic_subjects.add(subject)
    assert topic_subjects == {"food", "travel", "work"}
    # the tree is topic -> concept -> fact: each concept sits under at most one topic
    under = [c for concepts in tree.topics for c in concepts]
    assert len(under) == len(set(under))


def test_a_set_that_fits_one_concept_has_no_topic(corpus: Corpus) -> None:
    rows = list(range(0, 10)) + list(range(20, 30))  # ten food and ten travel memories
    tree = hierarchy(corpus.vectors[rows], languages=[corpus.languages[i] for i in rows])
    assert tree.topics == [] and tree.concepts
    assert purity(tree.concepts, [corpus.subjects[i] for i in rows]) >= 0.9


def test_a_small_mixed_set_is_split_by_subject(corpus: Corpus) -> None:
    rows = list(range(0, 6)) + list(range(40, 46))  # six food and six work memories
    clusters = cluster(corpus.vectors[rows], languages=[corpus.languages[i] for i in rows])
    labels = [corpus.subjects[i] for i in rows]
    assert len(clusters) >= 2
    assert purity(clusters, labels) >= 0.9


def test_clusters_do_not_depend_on_row_order(corpus: Corpus) -> None:
    first = cluster(corpus.vectors, languages=corpus.languages)
    assert cluster(corpus.vectors, languages=corpus.languages) == first
    order = np.random.default_rng(7).permutation(len(corpus.texts))
    shuffled = cluster(corpus.vectors[order], languages=[corpus.languages[i] for i in order])
    as_texts = {frozenset(corpus.texts[order[i]] for i in c) for c in shuffled}
    assert as_texts == {frozenset(corpus.texts[i] for i in c) for c in first}


# --------------------------------------------------------------------------- small and odd inputs


def unit_rows(*rows: list[float]) -> np.ndarray:
    matrix = np.array(rows, dtype=np.float32)
    return np.asarray(matrix / np.linalg.norm(matrix, axis=1, keepdims=True))


def test_tiny_inputs() -> None:
    assert hierarchy(np.zeros((0, 4), dtype=np.float32)) == Hierarchy()
    assert cluster(np.zeros((0, 384), dtype=np.float32)) == []
    one = unit_rows([1, 0, 0, 0])
    assert cluster(one) == [] and hierarchy(one).unclustered == [0]
    two = unit_rows([1, 0, 0, 0], [0.9, 0.1, 0, 0])
    assert cluster(two) == [[0, 1]]
    assert cluster(two, min_size=3) == [] and hierarchy(two, min_size=3).unclustered == [0, 1]


def test_identical_vectors_still_respect_max_size() -> None:
    same = unit_rows(*([[1.0, 2.0, 3.0]] * 5))
    tree = hierarchy(same, max_size=2)
    assert tree.concepts == [[0, 1], [2, 3]] and tree.unclustered == [4]
    assert cluster(same) == [[0, 1, 2, 3, 4]]


def test_invalid_input_is_rejected() -> None:
    with pytest.raises(ValueError, match="2-dimensional"):
        cluster(np.ones(4, dtype=np.float32))
    with pytest.raises(ValueError, match="NaN"):
        cluster(np.array([[1.0, np.nan], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="one per row"):
        cluster(unit_rows([1, 0], [0, 1]), languages=["en"])
    with pytest.raises(ValueError, match="max_size"):
        cluster(unit_rows([1, 0], [0, 1]), max_size=1)
