"""The ``rules`` stand-in for the tasks of ``streams.prompts.search``."""

from __future__ import annotations

import re

from memstream.streams.prompts.search import (
    GoalContext,
    GoalResponse,
    GoalType,
    ReasonerContext,
    ReasonerResponse,
)
from memstream.streams.text.relevance import TextIndex, overlap, query_terms
from memstream.streams.text.words import (
    cjk_count,
    en_words,
    words_of,
)

_QUESTION_WORDS = frozenset(
    words_of(
        "what when where who whom whose why how which is are am was were do does did can could "
        "should would will shall may might have has"
    )
)


_GENERATION_VERBS = frozenset(
    words_of(
        "write draft generate compose create summarize summarise plan outline rewrite translate "
        "prepare make"
    )
)


_POLITE = frozenset(words_of("please can could would will you help me us kindly"))


_ZH_QUESTION = tuple(words_of("吗 什么 怎么 怎样 为什么 哪 谁 几 多少 是否 如何 呢"))


_ZH_GENERATION = tuple(words_of("帮我写 给我写 请写 写一 生成 起草 撰写 编写 拟一 总结一下"))


_FIRST_PERSON = {
    "i": "the user",
    "me": "the user",
    "my": "the user's",
    "mine": "the user's",
    "myself": "the user",
    "i'm": "the user is",
    "i've": "the user has",
    "i'd": "the user would",
    "i'll": "the user will",
}


def _goal_type(query: str) -> GoalType:
    words = [w.lower() for w in re.findall(r"[A-Za-z']+", query)]
    lead = [w for w in words[:6] if w not in _POLITE]
    if (lead and lead[0] in _GENERATION_VERBS) or any(c in query for c in _ZH_GENERATION):
        return "generation"
    if "?" in query or "？" in query or (words and words[0] in _QUESTION_WORDS):
        return "qa"
    if any(c in query for c in _ZH_QUESTION):
        return "qa"
    return "retrieval"


def _is_chinese(text: str) -> bool:
    """Mostly Chinese, counting even a single character against no Latin words."""
    return cjk_count(text) > 0 and cjk_count(text) >= len(en_words(text))


def _third_person(query: str) -> str:
    """The query with first-person pronouns replaced, so it reads like a stored memory."""
    if _is_chinese(query):
        return query.replace("我们", "用户和同伴").replace("我", "用户").strip()

    def swap(match: re.Match[str]) -> str:
        return _FIRST_PERSON.get(match.group(0).lower(), match.group(0))

    text = re.sub(r"\b(?:i'm|i've|i'd|i'll|i|me|my|mine|myself)\b", swap, query, flags=re.I)
    text = text.strip()
    return text[:1].upper() + text[1:]


def _dedupe(items: list[str]) -> list[str]:
    """First occurrence of each item, compared case-insensitively, blanks dropped."""
    seen: set[str] = set()
    out = []
    for item in items:
        if item and item.lower() not in seen:
            seen.add(item.lower())
            out.append(item)
    return out


def rules_goal(ctx: GoalContext) -> GoalResponse:
    """Keywords of the query as keys and tags, and two or three literal rephrasings."""
    query = " ".join(ctx.query.split())
    terms = [t for t in query_terms(query, lower=False) if t.lower() not in _GENERATION_VERBS]
    keys = _dedupe(terms)[:6] or [query]
    chinese = _is_chinese(query)
    probes = [query, _third_person(query)]
    if keys != [query]:
        probes.append(
            ("用户提到" + "、".join(keys) + "。")
            if chinese
            else "The user mentioned " + ", ".join(keys) + "."
        )
    probes = _dedupe(probes)
    if len(probes) < 2:
        probes.append(("用户提到：" if chinese else "The user mentioned: ") + query)
    return GoalResponse(
        keys=keys,
        tags=[k.lower() for k in keys],
        goal_type=_goal_type(query),
        rephrased_instruction=query,
        internet_search=False,
        memories=probes[:5],
    )


def rules_reasoner(ctx: ReasonerContext) -> ReasonerResponse:
    """Candidates sharing a keyword with the query, in ranked order; all of them if none does."""
    terms = query_terms(ctx.query)
    chosen = [c.id for c in ctx.candidates if terms and overlap(terms, TextIndex(c.text)) > 0]
    return ReasonerResponse(selected_ids=chosen or [c.id for c in ctx.candidates])
