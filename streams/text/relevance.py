"""Lexical relevance: shared salient terms between a query and a memory (used by the search
and scheduler stand-ins and by the scheduler's and inference prompts).

Without a model, "is this memory about the query" is approximated by shared
salient terms: English words compared by a crude stem (so "flights" meets
"flight"), Chinese terms by substring (Chinese has no spaces to split on).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from memstream.streams.text.words import en_content_words, en_words, has_cjk, zh_terms

_CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
# Characters too common to signal a topic on their own.
_ZH_WEAK = frozenset(
    "的了是在和与跟也都就很要会去到把被对给让着过吗呢吧啊呀还又再才最太更不没有"
    "这那他她它我你您其个些么什怎哪谁嘛哦嗯啦能可以用户们上下里周天年月日号点"
)

# Question words ("哪里", "几点", "谁的") say what is asked, not what it is about.
_ZH_QUESTION_CHARS = frozenset("哪谁吗呢么几啥")


def stem(word: str) -> str:
    """A rough English stem: enough to match plurals and -ing/-ed forms, nothing more."""
    w = word.lower().replace("\u2019", "'")
    if w.endswith("'s"):
        w = w[:-2]
    if len(w) > 4 and w.endswith("ies"):
        return w[:-3] + "y"
    for suffix in ("ing", "ed"):
        if len(w) > len(suffix) + 3 and w.endswith(suffix):
            w = w[: -len(suffix)]
            # "running" -> "runn" -> "run"
            if len(w) > 3 and w[-1] == w[-2] and w[-1] not in "aeiouls":
                w = w[:-1]
            return w
    if len(w) > 3 and w.endswith("es") and w[-3] in "sxz":
        return w[:-2]
    if len(w) > 3 and w.endswith("s") and not w.endswith("ss"):
        return w[:-1]
    return w


def query_terms(text: str, *, lower: bool = True) -> list[str]:
    """Salient terms of a query in order: English content words, then Chinese terms."""
    terms = [w.lower() if lower else w for w in en_content_words(text)]
    if has_cjk(text):
        terms.extend(t for t in zh_terms(text) if not _ZH_QUESTION_CHARS.intersection(t))
        if not any(has_cjk(t) for t in terms):
            # No two-character term survived the stop list: fall back to the content characters.
            terms.extend(ch for run in _CJK_RUN.findall(text) for ch in run if ch not in _ZH_WEAK)
    return list(dict.fromkeys(terms))


class TextIndex:
    """One text prepared for term lookups: lowercase for substrings, stems for English words."""

    __slots__ = ("lower", "stems")

    def __init__(self, text: str) -> None:
        self.lower = text.lower()
        self.stems = {stem(w) for w in en_words(text)}

    def contains(self, term: str) -> bool:
        if has_cjk(term):
            return term in self.lower
        return stem(term) in self.stems or (" " in term and term in self.lower)


def overlap(terms: Iterable[str], text: str | TextIndex) -> int:
    """How many of ``terms`` occur in ``text``."""
    index = text if isinstance(text, TextIndex) else TextIndex(text)
    return sum(1 for term in terms if index.contains(term))


def covered(term: str, texts: Iterable[str | TextIndex]) -> bool:
    """True when ``term`` appears in any of ``texts`` (case-insensitive substring or same stem)."""
    low = term.lower()
    for text in texts:
        index = text if isinstance(text, TextIndex) else TextIndex(text)
        if low in index.lower or index.contains(low):
            return True
    return False
