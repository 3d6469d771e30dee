"""Words a memory uses for what a question asks about in other words, for keyword ranking.

Fast search has no model to rephrase a question, and the small embedder misses some
everyday links ("what can't I eat?" is answered by "I'm allergic to shellfish.", which
shares no word with it and which e5 ranks below "I can't stand horror movies."). This
short table adds, at half weight, the words such memories are said with. It is a stand-in
for a model's rephrasings (``fine`` mode), kept small on purpose: needs a person states
about themselves (food, drink, health), English and Chinese.
"""

from __future__ import annotations

from collections.abc import Iterable

from memstream.streams.core.lexical import terms

# question word -> words a memory answering it is often said with
_RELATED: dict[str, str] = {
    "eat": "allergic allergy vegetarian vegan diet food",
    "food": "allergic allergy vegetarian vegan diet eat",
    "meal": "allergic allergy vegetarian vegan diet food",
    "drink": "alcohol coffee tea allergic",
    "health": "allergic allergy illness sick medication",
    "吃": "过敏 素食 忌口 食物",
    "食物": "过敏 素食 忌口 吃",
    "喝": "咖啡 茶 酒 过敏",
}
RELATED: dict[str, list[str]] = {}
for _word, _others in _RELATED.items():
    for _key in terms(_word) or [_word]:
        RELATED[_key] = [t for w in _others.split() for t in (terms(w) or [w])]


def related(query_terms: Iterable[str]) -> list[str]:
    """The related words of ``query_terms`` that are not among them."""
    given = set(query_terms)
    out = [w for t in given for w in RELATED.get(t, ()) if w not in given]
    return list(dict.fromkeys(out))
