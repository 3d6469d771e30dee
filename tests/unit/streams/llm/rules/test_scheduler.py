"""The rules stand-ins of the scheduler's tasks (streams/llm/rules/scheduler.py): keywords,
rerank and the similarity floors of the filter, on real e5 similarities."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from memstream.streams.embed.local import LocalEmbedder
from memstream.streams.llm.rules import RulesLLM
from memstream.streams.llm.rules.scheduler import rules_filter, rules_rerank
from memstream.streams.prompts.scheduler import (
    E5_FLOOR,
    E5_FLOOR_CJK,
    FILTER,
    KEYWORDS,
    FilterContext,
    KeywordContext,
    RerankContext,
)


async def test_keywords_rules_stand_in_is_the_fallback() -> None:
    answer = await RulesLLM().run(KEYWORDS, KeywordContext(query="When is my flight to Lisbon?"))
    assert answer.keywords == ["flight", "lisbon"]


# --------------------------------------------------------------------------- rerank

CANDIDATES = [
    "The user plays tennis on Saturdays.",
    "The user's flight to Lisbon is on May 14.",
    "The user is vegetarian.",
    "The user booked a hotel in Lisbon near the flight's arrival airport.",
]


def test_rules_rerank_keeps_the_search_order() -> None:
    # the candidates arrive ranked by the search; similarity or shared words do not reorder
    ctx = RerankContext(queries=["what should I eat?", "my Lisbon flight"], candidates=CANDIDATES)
    assert rules_rerank(ctx).order == [0, 1, 2, 3]
    ctx = RerankContext(
        queries=["my Lisbon flight"], candidates=CANDIDATES, similarities=[0.9, 0.8, 0.95, 0.8]
    )
    assert rules_rerank(ctx).order == [0, 1, 2, 3]
    with pytest.raises(ValidationError, match="similarities"):
        RerankContext(queries=["q"], candidates=CANDIDATES, similarities=[0.5])


def test_rules_filter_by_keywords_without_similarities() -> None:
    ctx = FilterContext(queries=["when do I fly to Lisbon?"], candidates=CANDIDATES)
    assert rules_filter(ctx).keep == [1, 3]
    nothing = FilterContext(queries=["any news?"], candidates=CANDIDATES)
    assert rules_filter(nothing).keep == [0, 1, 2, 3]


def test_rules_filter_by_floor_or_shared_keyword() -> None:
    sims = [0.70, 0.74, 0.79, 0.75]
    ctx = FilterContext(queries=["my hotel"], candidates=CANDIDATES, similarities=sims)
    # 2 passes the default floor, 3 shares "hotel"; 0 and 1 go
    assert rules_filter(ctx).keep == [2, 3]
    explicit = FilterContext(
        queries=["my hotel"], candidates=CANDIDATES, similarities=sims, similarity_floor=0.72
    )
    assert rules_filter(explicit).keep == [1, 2, 3]
    none_pass = FilterContext(queries=["weather"], candidates=CANDIDATES, similarities=[0.1] * 4)
    assert rules_filter(none_pass).keep == []


def test_filter_floor_depends_on_language_pair() -> None:
    ctx = FilterContext(
        queries=["我今晚做什么菜？"],
        candidates=["用户是素食者", "The user is vegetarian"],
        similarities=[0.84, 0.79],
    )
    assert (ctx.floor_for(0), ctx.floor_for(1)) == (E5_FLOOR_CJK, E5_FLOOR)
    assert rules_filter(ctx).keep == [1]


@pytest.fixture(scope="module")
def e5() -> LocalEmbedder:
    return LocalEmbedder()


async def similarities(e5: LocalEmbedder, query: str, texts: list[str]) -> list[float]:
    q = await e5.embed_queries([query])
    p = await e5.embed_passages(texts)
    return [float(x) for x in p @ q[0]]


@pytest.mark.parametrize(
    ("query", "related", "unrelated"),
    [
        (
            "what should I cook tonight?",
            "The user is vegetarian",
            "The user's flight to Lisbon is on May 14",
        ),
        (
            "when is my flight?",
            "The user's flight to Lisbon is on May 14",
            "The user is vegetarian",
        ),
        (
            "what gift should I buy for my mom?",
            "The user's mother's birthday is on March 3",
            "The user plays tennis on Saturdays",
        ),
        ("给妈妈买什么生日礼物好？", "用户的妈妈生日是3月3日", "用户在一家银行做数据工程师"),
        ("我今晚应该做什么菜？", "用户是素食者", "用户5月14日飞往里斯本"),
    ],
    ids=["en-cook", "en-flight", "en-gift", "zh-gift", "zh-cook"],
)
async def test_default_floor_on_real_e5_similarities(
    e5: LocalEmbedder, query: str, related: str, unrelated: str
) -> None:
    sims = await similarities(e5, query, [related, unrelated])
    ctx = FilterContext(queries=[query], candidates=[related, unrelated], similarities=sims)
    assert rules_filter(ctx).keep == [0], sims
    answer = await RulesLLM().run(FILTER, ctx)
    assert answer.keep == [0]


async def test_one_floor_for_both_languages_would_not_work(e5: LocalEmbedder) -> None:
    """Why Chinese pairs get their own floor: unrelated Chinese scores above related English."""
    en = await similarities(e5, "what should I cook tonight?", ["The user is vegetarian"])
    zh = await similarities(e5, "我今晚应该做什么菜？", ["用户5月14日飞往里斯本"])
    assert zh[0] > en[0] >= E5_FLOOR
