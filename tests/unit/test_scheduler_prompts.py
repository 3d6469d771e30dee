"""The scheduler's model tasks: keywords, retrieval decision, rerank and filter."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from memstream.streams.embed.local import LocalEmbedder
from memstream.streams.llm.openai_llm import OpenAILLM
from memstream.streams.llm.rules import RulesLLM
from memstream.streams.llm.rules.scheduler import rules_filter, rules_rerank
from memstream.streams.prompts.scheduler import (
    E5_FLOOR,
    E5_FLOOR_CJK,
    FILTER,
    KEYWORDS,
    MAX_KEYWORDS,
    RERANK,
    RETRIEVAL_DECISION,
    DecisionContext,
    DecisionResponse,
    FilterContext,
    FilterResponse,
    KeywordContext,
    KeywordResponse,
    RerankContext,
    RerankResponse,
    fallback_decision,
    fallback_keywords,
    render_decision,
    render_filter,
    render_keywords,
    render_rerank,
    resolve_keep,
    resolve_order,
)
from tests.fakes.openai_server import Reply, ScriptedOpenAI, last_user_message

JSON_ONLY = "JSON object and nothing else"

# --------------------------------------------------------------------------- keywords


def test_fallback_keywords_english() -> None:
    text = "What should I cook tonight? I'm vegetarian, and my sister Mei visits on May 14. Cook!"
    assert fallback_keywords(text) == ["cook", "vegetarian", "sister", "mei", "visits", "may", "14"]


def test_fallback_keywords_chinese_by_character() -> None:
    # punctuation and function characters (我, 的, 什, 么, 吗 ...) go; repeats collapse
    assert fallback_keywords("我今晚吃什么？火锅吗？还是火锅吧！") == ["今", "晚", "吃", "火", "锅"]


def test_fallback_keywords_mixed_text() -> None:
    assert fallback_keywords("我用Python写爬虫，and I love Rust! python") == [
        "用",
        "python",
        "写",
        "爬",
        "虫",
        "rust",
    ]


def test_fallback_keywords_at_most_twenty_in_order() -> None:
    words = [f"topic{i}" for i in range(30)]
    assert fallback_keywords(" ".join(words + words)) == words[:MAX_KEYWORDS]
    han = "春夏秋冬山水风雨花草树木鸟鱼虫兽日月星辰云雪江河湖海"
    assert fallback_keywords(han) == list(han[:MAX_KEYWORDS])


def test_keyword_response_cleans_and_caps() -> None:
    answer = KeywordResponse.model_validate(
        {"keywords": [" Lisbon ", "lisbon", ""] + list("abcdefghijklmnopqrstuvwxyz")}
    )
    assert answer.keywords[0] == "Lisbon" and len(answer.keywords) == MAX_KEYWORDS
    assert KeywordResponse.model_validate({"keywords": "航班, 里斯本"}).keywords == [
        "航班",
        "里斯本",
    ]


def test_keyword_prompt() -> None:
    system, user = render_keywords(KeywordContext(query="我下周去里斯本的航班几点？"))
    assert "我下周去里斯本的航班几点？" in user["content"]
    assert "in Chinese" in system["content"] and "Never translate" in system["content"]
    assert f"Up to {MAX_KEYWORDS} keywords" in system["content"]
    assert JSON_ONLY in system["content"] and '"keywords"' in system["content"]
    en_system = render_keywords(KeywordContext(query="When is my flight to Lisbon?"))[0]
    assert "in English" in en_system["content"]


async def test_keywords_rules_stand_in_is_the_fallback() -> None:
    answer = await RulesLLM().run(KEYWORDS, KeywordContext(query="When is my flight to Lisbon?"))
    assert answer.keywords == ["flight", "lisbon"]


# --------------------------------------------------------------------------- retrieval decision

WM = ["The user's flights to Lisbon are on May 14.", "用户是素食者，对花生过敏。"]


def decide(*queries: str, wm: list[str] = WM) -> DecisionResponse:
    return fallback_decision(DecisionContext(queries=list(queries), working_memory=wm))


def test_decision_no_retrieval_when_working_memory_covers_the_query() -> None:
    assert decide("When is my FLIGHT to lisbon?").need_retrieval is False
    assert decide("我对花生过敏吗？").need_retrieval is False


def test_decision_retrieves_what_working_memory_lacks() -> None:
    answer = decide("When is my flight to Lisbon?", "Which hotel did I book?")
    assert answer.need_retrieval is True
    assert answer.missing_evidence == ["Which hotel did I book?"]
    assert "hotel" in answer.reason
    zh = decide("我的航班几点起飞？")
    assert zh.need_retrieval is True and zh.missing_evidence == ["我的航班几点起飞？"]


def test_decision_only_the_latest_query_counts() -> None:
    assert decide("Which hotel did I book?", "When is my flight to Lisbon?",
                  "And my flight to Lisbon?").need_retrieval is False


def test_decision_a_new_subject_retrieves() -> None:
    """Working memory mentions the words, but it was fetched for another question."""
    answer = decide("Which hotel did I book?", "And my flight to Lisbon?")
    assert answer.need_retrieval is True and "new subject" in answer.reason


def test_decision_empty_working_memory_and_small_talk() -> None:
    assert decide("what should I cook tonight?", wm=[]).need_retrieval is True
    assert decide("thanks!", wm=[]).need_retrieval is False
    assert decide("谢谢！", wm=[]).need_retrieval is False
    assert decide("你好", wm=[]).need_retrieval is False
    assert decide("Thanks! And when is my dentist appointment?", wm=[]).need_retrieval is True


def test_decision_response_validation() -> None:
    no = DecisionResponse.model_validate({"need_retrieval": False, "missing_evidence": ["x"]})
    assert no.missing_evidence == []
    many = [f"evidence {i}" for i in range(8)]
    yes = DecisionResponse.model_validate({"need_retrieval": "true", "missing_evidence": many})
    assert yes.need_retrieval is True and yes.missing_evidence == many[:5]
    with pytest.raises(ValidationError):
        DecisionResponse.model_validate({"missing_evidence": []})


def test_decision_prompt() -> None:
    ctx = DecisionContext(
        queries=["Where am I flying?", "我的酒店订了吗？"],
        last_answer="You fly to Lisbon on May 14.",
        working_memory=WM,
    )
    system, user = render_decision(ctx)
    text = user["content"]
    assert text.index("Where am I flying?") < text.index("(latest) 我的酒店订了吗？")
    assert "You fly to Lisbon on May 14." in text
    assert all(m in text for m in WM)
    assert "The latest query is in Chinese." in text
    assert "language of the latest query" in system["content"]
    assert JSON_ONLY in system["content"] and '"missing_evidence"' in system["content"]
    with pytest.raises(ValidationError):
        DecisionContext(queries=["  "], working_memory=[])


async def test_decision_runs_through_the_rules_provider() -> None:
    ctx = DecisionContext(queries=["Which hotel did I book?"], working_memory=WM)
    assert (await RulesLLM().run(RETRIEVAL_DECISION, ctx)).need_retrieval is True


# --------------------------------------------------------------------------- rerank

CANDIDATES = [
    "The user plays tennis on Saturdays.",
    "The user's flight to Lisbon is on May 14.",
    "The user is vegetarian.",
    "The user booked a hotel in Lisbon near the flight's arrival airport.",
]


def test_rerank_response_rejects_duplicates_and_negatives() -> None:
    assert RerankResponse.model_validate({"order": [2, "0", 1]}).order == [2, 0, 1]
    with pytest.raises(ValidationError, match="more than once"):
        RerankResponse.model_validate({"order": [1, 0, 1]})
    with pytest.raises(ValidationError):
        RerankResponse.model_validate({"order": [0, -1]})


def test_resolve_order_checks_range_and_completes() -> None:
    assert resolve_order([3, 1], 4) == [3, 1, 0, 2]
    with pytest.raises(ValueError, match="outside"):
        resolve_order([0, 4], 4)


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


def test_rerank_prompt() -> None:
    system, user = render_rerank(RerankContext(queries=["my Lisbon flight"], candidates=CANDIDATES))
    text = user["content"]
    assert "(latest) my Lisbon flight" in text
    assert all(f"[{i}] {c}" in text for i, c in enumerate(CANDIDATES))
    assert "indices 0 to 3" in text
    assert "each exactly once" in system["content"] and "different languages" in system["content"]
    assert JSON_ONLY in system["content"] and '"order"' in system["content"]


async def test_rerank_duplicate_answer_is_retried(scripted_openai: ScriptedOpenAI) -> None:
    scripted_openai.enqueue(Reply.json({"order": [1, 1, 0]}), Reply.json({"order": [3, 1]}))
    llm = OpenAILLM(scripted_openai.llm_settings())
    ctx = RerankContext(queries=["my Lisbon flight"], candidates=CANDIDATES)
    answer = await llm.run(RERANK, ctx)
    assert resolve_order(answer.order, len(CANDIDATES)) == [3, 1, 0, 2]
    assert "more than once" in last_user_message(scripted_openai.chat_requests[1])
    await llm.close()


# --------------------------------------------------------------------------- filter


def test_filter_response_and_resolve_keep() -> None:
    assert FilterResponse.model_validate({"keep": [2, 0, 2]}).keep == [2, 0]
    assert resolve_keep([2, 0], 3) == [0, 2]
    with pytest.raises(ValueError, match="outside"):
        resolve_keep([0, 3], 3)
    with pytest.raises(ValidationError):
        FilterResponse.model_validate({"keep": [-1]})


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


def test_filter_prompt() -> None:
    system, user = render_filter(
        FilterContext(queries=["q1", "my Lisbon flight"], candidates=CANDIDATES)
    )
    text = user["content"]
    assert text.index("- q1") < text.index("(latest) my Lisbon flight")
    assert all(f"[{i}] {c}" in text for i, c in enumerate(CANDIDATES))
    assert "When unsure, keep" in system["content"] and "different languages" in system["content"]
    assert JSON_ONLY in system["content"] and '"keep"' in system["content"]


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


def test_decision_retrieves_when_the_words_are_only_scattered() -> None:
    """Each word is somewhere in working memory, but no item is about the question."""
    wm = ["Melanie went to the museum with her kids.", "Caroline painted a sunset.",
          "The weekend was quiet."]
    answer = decide("What did Melanie paint last weekend?", wm=wm)
    assert answer.need_retrieval is True
    assert answer.missing_evidence == ["What did Melanie paint last weekend?"]
    assert decide("What did Caroline paint?", wm=wm).need_retrieval is False
