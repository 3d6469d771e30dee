"""Word matching for turn ranking (streams/core/lexical.py): BM25 over lemmatised terms."""

from __future__ import annotations

from memstream.streams.core.lexical import BM25, terms


def test_bm25_ranks_by_stemmed_words() -> None:
    docs = [terms(t) for t in ("I love painting landscapes.", "We paint walls.", "Tea time.")]
    scores = BM25(docs).scores(terms("painted"))
    assert scores[2] == 0 and scores[0] > 0 and scores[1] > 0


def test_an_irregular_past_tense_meets_its_base_form() -> None:
    """A question asks "why did she choose", the turn says "I chose": no stemmer maps the
    one to the other, the lemma does."""
    docs = [terms(t) for t in ("I chose them for their support.", "We bought new shoes.",
                               "The kids went swimming.")]
    bm25 = BM25(docs)
    assert [bm25.scores(terms(q)).argmax() for q in ("choose", "buy", "go")] == [0, 1, 2]
    assert terms("Painted paintings") == terms("paint paint")


def test_a_day_named_once_meets_it_named_as_a_habit() -> None:
    """"What do I do on Wednesday?" is answered by "on Wednesdays": the lemma of the one was
    capitalised and of the other not, and the two never met."""
    docs = [terms(t) for t in ("I coach soccer on Wednesdays.", "I swim on Saturday mornings.")]
    assert BM25(docs).scores(terms("What do I do on Wednesday?")).argmax() == 0
    assert terms("Wednesday April") == terms("wednesdays april")
