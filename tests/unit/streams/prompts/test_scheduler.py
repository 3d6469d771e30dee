"""The scheduler's model tasks (streams/prompts/scheduler.py): keywords and the retrieval
decision, their prompts, answers and fallbacks."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from memstream.streams.llm.rules import RulesLLM
from memstream.streams.prompts.scheduler import (
    MAX_KEYWORDS,
    RETRIEVAL_DECISION,
    DecisionContext,
    DecisionResponse,
    KeywordContext,
    KeywordResponse,
    fallback_decision,
    fallback_keywords,
    render_decision,
    render_keywords,
)

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


def test_decision_retrieves_when_the_words_are_only_scattered() -> None:
    """Each word is somewhere in working memory, but no item is about the question."""
    wm = ["Melanie went to the museum with her kids.", "Caroline painted a sunset.",
          "The weekend was quiet."]
    answer = decide("What did Melanie paint last weekend?", wm=wm)
    assert answer.need_retrieval is True
    assert answer.missing_evidence == ["What did Melanie paint last weekend?"]
    assert decide("What did Caroline paint?", wm=wm).need_retrieval is False
