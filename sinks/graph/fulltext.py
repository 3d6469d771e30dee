"""Words for the graph store's full-text (BM25-style keyword) index, the same on both sides.

The engines' own analyzers split Chinese into single characters (or not at all), so
memstream tokenizes before the text reaches the index: Latin-script words lowercased,
Chinese segmented into words with jieba (search mode: long words and their parts), other
scripts (kana, hangul) kept as written runs plus their character pairs. A node's indexed
property is these words joined by spaces, led by a token of its cube, and a query asks for
the cube's token AND any of the query's words. Only ``[0-9a-z_]`` and letters of a script
ever reach the query text, so no query-syntax character of either engine can.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable, Sequence
from typing import Literal

Syntax = Literal["redisearch", "lucene"]

# Words that carry no topic. Dropped from queries and from indexed text, so a question's
# "when did ... the" never outweighs its content words.
def _listed(text: str) -> frozenset[str]:
    return frozenset(text.split())


_EN_STOPWORDS = _listed("""
a about above after again against all am an and any are aren as at be because been before
being below between both but by can cannot could couldn did didn do does doesn doing don down
during each few for from further had hadn has hasn have haven having he her here hers herself
him himself his how i if in into is isn it its itself just let me more most my myself no nor
not of off on once only or other ought our ours ourselves out over own same she should so
some such than that the their theirs them themselves then there these they this those through
to too under until up very was wasn we were weren what when where which while who whom why
will with won would wouldn you your yours yourself yourselves also ll re ve s t d m o y ok oh
hey hi yes yeah really would like get got one thing things something anything
""")
_ZH_STOPWORDS = _listed("""
的 了 是 在 我 你 他 她 它 们 我们 你们 他们 她们 这 那 这个 那个 就 都 也 还 和 与 及 或 吗
呢 吧 啊 呀 哦 嗯 着 过 被 把 给 让 一个 一些 什么 怎么 为什么 哪 哪里 谁 多少 有 没有 不 很
太 又 再 才 会 能 要 想 说 对 从 到 上 下 里 中 个 之 其 而 但 如果 因为 所以 自己
""")

_WORD = re.compile(
    r"[0-9A-Za-z\u00c0-\u024f\u0370-\u03ff\u0400-\u04ff]+"  # Latin (with accents), Greek, Cyrillic
    r"|[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+"  # Han
    r"|[\u3040-\u30ff\u31f0-\u31ff]+"  # kana
    r"|[\uac00-\ud7af]+"  # hangul
)
_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_KANA_OR_HANGUL = re.compile(r"[\u3040-\u30ff\u31f0-\u31ff\uac00-\ud7af]")

_jieba_lock = threading.Lock()
_jieba_ready = False


def _segment(run: str) -> list[str]:
    """Chinese words of a run of Han characters: jieba's search mode, plus the character
    pairs of words of three or more characters (the statistical model glues a name to its
    neighbour, "叫小白", which "小白" must still find)."""
    global _jieba_ready
    import jieba

    if not _jieba_ready:
        with _jieba_lock:
            if not _jieba_ready:
                jieba.setLogLevel(logging.WARNING)
                jieba.initialize()
                _jieba_ready = True
    out: list[str] = []
    for word in jieba.lcut_for_search(run):
        out.append(word)
        if len(word) > 2:
            out.extend(word[i:i + 2] for i in range(len(word) - 1))
    return list(dict.fromkeys(w for w in out if w.strip()))


def words(text: str) -> list[str]:
    """The index words of ``text``, in order, repeats kept (term frequency counts)."""
    out: list[str] = []
    for match in _WORD.finditer(text):
        run = match.group()
        if _HAN.match(run):
            out.extend(w for w in _segment(run) if w not in _ZH_STOPWORDS)
        elif _KANA_OR_HANGUL.match(run):
            out.append(run)
            if len(run) > 2:
                out.extend(run[i:i + 2] for i in range(len(run) - 1))
        else:
            low = run.lower()
            if low not in _EN_STOPWORDS and (len(low) > 1 or low.isdigit()):
                out.append(low)
    return out


def cube_token(cube_key: str) -> str:
    """The word every node of a cube carries (``cube_key`` is a hex digest)."""
    return f"cube{cube_key}"


# Absolute times memstream writes into texts ("[2023-05-07]", an episode's "[2023-05-08 13:56]"):
# not words anyone searches by, and their digits would match unrelated numbers.
_STAMP = re.compile(r"\[\d{4}-\d{2}(?:-\d{2})?(?: \d{2}:\d{2})?\]")


def indexed_text(cube_key: str, parts: Iterable[str]) -> str:
    """The value of a node's indexed property: its cube's token, then its words."""
    found = [w for part in parts for w in words(_STAMP.sub(" ", part))]
    return " ".join([cube_token(cube_key), *found])


def query_terms(text: str, limit: int = 32) -> list[str]:
    """Distinct query words, in order, at most ``limit``."""
    return list(dict.fromkeys(words(text)))[:limit]


def query_string(cube_key: str, terms: Sequence[str], syntax: Syntax) -> str:
    """The engine's query: the cube's token and any of ``terms`` (words from ``words``)."""
    if not terms:
        raise ValueError("a keyword query needs at least one word")
    match syntax:
        case "redisearch":
            return f"{cube_token(cube_key)} ({'|'.join(terms)})"
        case "lucene":
            return f"+{cube_token(cube_key)} +({' '.join(terms)})"
