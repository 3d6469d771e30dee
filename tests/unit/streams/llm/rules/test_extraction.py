"""The deterministic extraction stand-in: sentences kept as said, dates added, whole-word tags."""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Literal

import jieba.posseg
import pytest

from memstream.streams.llm.port import LLMError, Task
from memstream.streams.llm.rules import STAND_INS, RulesLLM
from memstream.streams.llm.rules.extraction import rules
from memstream.streams.prompts.extraction import (
    EXTRACTION,
    ExtractedItem,
    ExtractionContext,
    ExtractionMessage,
    ExtractionResponse,
)

FRIDAY = datetime(2025, 3, 14, 9, 30, tzinfo=UTC)  # a Friday
SHANGHAI = timezone(timedelta(hours=8))
Role = Literal["user", "assistant", "system", "tool"]


def chat(*messages: tuple[str, Role, str], at: datetime = FRIDAY) -> ExtractionContext:
    return ExtractionContext(
        user_id="u1",
        session_id="s1",
        now=at,
        messages=[
            ExtractionMessage(id=mid, role=role, content=text, timestamp=at)
            for mid, role, text in messages
        ],
    )


def by_text(result: ExtractionResponse, needle: str) -> ExtractedItem:
    hits = [m for m in result.memories if needle in m.value]
    assert len(hits) == 1, [m.value for m in result.memories]
    return hits[0]


ENGLISH = chat(
    ("m1", "user", "Hi! I love hiking in the Alps. I'm allergic to peanuts."),
    ("m2", "assistant", "You should try a vegan curry with cashews, you would love it."),
    ("m3", "user", "My sister Anna is visiting me tomorrow. What should I cook for her?"),
    ("m4", "user", "i usually go running every morning. We are moving to Berlin next week."),
    ("m5", "user", "thanks!"),
)


def test_english_sentences_are_stored_verbatim_in_the_first_person() -> None:
    result = rules(ENGLISH)
    hiking = by_text(result, "hiking")
    assert hiking.value == "I love hiking in the Alps."
    assert hiking.memory_type == "UserMemory"
    assert hiking.type == "opinion"
    allergy = by_text(result, "peanuts")
    assert allergy.value == "I'm allergic to peanuts."
    assert allergy.memory_type == "UserMemory"
    running = by_text(result, "running")
    assert running.value == "i usually go running every morning."  # as typed, lowercase i
    assert running.memory_type == "UserMemory"


@pytest.mark.parametrize(
    "sentence",
    [
        "I no longer eat meat.",
        "I hate waking up early myself.",
        "My wife and I watch movies together; we love horror films.",
        "My boss said the launch moves to March.",
        "I can\u2019t stand loud restaurants.",
        "私は毎朝コーヒーを飲みます。",
        "저는 서울에 살고 있어요.",
        "Ich wohne in München.",
        "J'adore le café au lait.",
        "我养了一只叫小白的猫。",
    ],
)
def test_a_sentence_is_kept_exactly_as_written(sentence: str) -> None:
    [memory] = rules(chat(("m1", "user", sentence))).memories
    assert memory.value == sentence


def test_leading_fillers_are_trimmed_and_whitespace_normalised_only() -> None:
    result = rules(chat(("m1", "user", "Hi,  I   just adopted a puppy.  嗯，我最近在学做川菜。")))
    assert [m.value for m in result.memories] == [
        "I just adopted a puppy.",
        "我最近在学做川菜。",
    ]


def test_english_events_get_resolved_dates_added_after_the_phrase() -> None:
    result = rules(ENGLISH)
    visit = by_text(result, "Anna")
    assert visit.memory_type == "LongTermMemory"
    assert visit.value == "My sister Anna is visiting me tomorrow [2025-03-15]."
    assert visit.memory_time == "2025-03-15"
    move = by_text(result, "Berlin")
    assert move.memory_type == "LongTermMemory"
    assert move.value == "We are moving to Berlin next week [week of 2025-03-17]."
    assert move.memory_time == "2025-03-17"  # the Monday of the following week


MAY_8 = datetime(2023, 5, 8, 18, 0, tzinfo=UTC)  # a Monday


@pytest.mark.parametrize(
    ("said", "stored", "day"),
    [
        ("I went there yesterday.", "I went there yesterday [2023-05-07].", "2023-05-07"),
        ("I'm moving to Lisbon next month.", "I'm moving to Lisbon next month [2023-06].",
         "2023-06-01"),
        ("We got married last year.", "We got married last year [2022].", None),
        ("I start a new job next year.", "I start a new job next year [2024].", None),
        ("I met Jon 2 weeks ago.", "I met Jon 2 weeks ago [week of 2023-04-24].", "2023-04-24"),
        ("I went camping last weekend.", "I went camping last weekend [weekend of 2023-05-06].",
         "2023-05-06"),
        ("I'm resting this weekend.", "I'm resting this weekend [weekend of 2023-05-13].",
         "2023-05-13"),
        ("I was ill the week before.", "I was ill the week before [week of 2023-05-01].",
         "2023-05-01"),
        ("Yesterday's dinner with Sam was lovely.",
         "Yesterday's [2023-05-07] dinner with Sam was lovely.", "2023-05-07"),
        ("我明天去北京出差。", "我明天[2023-05-09]去北京出差。", "2023-05-09"),
        ("我明年要去日本留学。", "我明年[2024]要去日本留学。", None),
        ("我去年搬到了上海。", "我去年[2022]搬到了上海。", None),
        ("三天前我丢了钱包。", "三天前[2023-05-05]我丢了钱包。", "2023-05-05"),
        ("上周末我们去爬山了。", "上周末[2023-05-06那个周末]我们去爬山了。", "2023-05-06"),
    ],
)
def test_relative_dates_are_added_in_brackets_never_spliced(
    said: str, stored: str, day: str | None
) -> None:
    [memory] = rules(chat(("m1", "user", said), at=MAY_8)).memories
    assert memory.value == stored
    assert memory.memory_time == day


def test_a_named_other_speaker_is_kept_with_the_name_in_front() -> None:
    ctx = ExtractionContext(
        user_id="caroline",
        now=MAY_8,
        messages=[
            ExtractionMessage(id="c1", role="user", content="I love painting too.",
                              timestamp=MAY_8),
            ExtractionMessage(id="m1", role="assistant", name="Melanie", timestamp=MAY_8,
                              content="Oh nice! I painted a sunrise last year. Do you paint?"),
        ],
    )
    result = rules(ctx)
    assert [m.value for m in result.memories] == [
        "I love painting too.",
        "Melanie: I painted a sunrise last year [2022].",
    ]
    melanie = result.memories[1]
    assert melanie.memory_type == "LongTermMemory"
    assert melanie.source_message_ids == ["m1"]
    assert "melanie" in melanie.tags and "sunrise" in melanie.tags


def test_assistant_suggestions_are_not_attributed_to_the_user() -> None:
    result = rules(ENGLISH)
    assert not [m for m in result.memories if "curry" in m.value or "cashew" in m.value]
    assert all("m2" not in m.source_message_ids for m in result.memories)
    unnamed = chat(("a1", "assistant", "I think you would love a trip to Norway next month."))
    assert rules(unnamed).memories == []


def test_questions_and_greetings_are_skipped() -> None:
    result = rules(ENGLISH)
    assert not [m for m in result.memories if "cook" in m.value or "thank" in m.value.lower()]
    assert len(result.memories) == 5


def test_provenance_tags_key_and_summary() -> None:
    result = rules(ENGLISH)
    assert by_text(result, "hiking").source_message_ids == ["m1"]
    assert by_text(result, "Anna").source_message_ids == ["m3"]
    assert by_text(result, "Berlin").source_message_ids == ["m4"]
    for memory in result.memories:
        assert memory.tags, memory
        assert all(t == t.lower() and t.strip() for t in memory.tags)
        assert memory.key and len(memory.key.split()) <= 5
        assert all(word in memory.value for word in memory.key.split())  # whole words
    assert by_text(result, "hiking").key == "love hiking in the Alps"
    assert by_text(result, "hiking").tags == ["hiking", "alps", "preference"]
    assert by_text(result, "peanuts").tags == ["allergic", "peanuts", "personal"]
    assert {"sister", "anna"} <= set(by_text(result, "Anna").tags)
    assert result.summary == (
        "I love hiking in the Alps. I'm allergic to peanuts. "
        "My sister Anna is visiting me tomorrow [2025-03-15]. "
        "i usually go running every morning. "
        "We are moving to Berlin next week [week of 2025-03-17]."
    )


def test_english_tags_are_whole_content_words() -> None:
    said = "I no longer eat meat since my doctor told me to stop. I hate waking up early myself."
    result = rules(chat(("m1", "user", said)))
    tags = {t for m in result.memories for t in m.tags}
    assert not tags & {"longer", "since", "myself", "told", "i", "me", "my", "no"}
    assert {"meat", "doctor", "waking", "early"} <= tags
    for memory in result.memories:
        for tag in memory.tags:
            if tag not in ("habit", "preference", "personal", "event", "plan"):
                assert re.search(rf"\b{re.escape(tag)}\b", memory.value.lower()), tag
    meat = by_text(result, "meat")
    assert meat.key == "no longer eat meat"


def test_chinese_tags_are_jieba_words_never_fragments() -> None:
    sentence = "我养了一只叫小白的猫"
    [memory] = rules(chat(("m1", "user", sentence + "。"))).memories
    words = {pair.word for pair in jieba.posseg.cut(sentence)}  # jieba's own segmentation
    assert memory.tags
    for tag in memory.tags:
        assert len(tag) >= 2 and tag in words, tag
    assert "小白" in memory.tags
    assert not {"叫小", "一只", "养了"} & set(memory.tags)
    assert memory.key == "养了一只叫小白的猫"


def test_other_peoples_statements_are_long_term_facts() -> None:
    result = rules(chat(("m1", "user", "My boss said the launch moves to March.")))
    [memory] = result.memories
    assert memory.memory_type == "LongTermMemory"
    assert memory.value == "My boss said the launch moves to March."


CHINESE = chat(
    ("z1", "user", "你好！我喜欢喝茶，尤其是绿茶。我下周要去北京出差。"),
    ("z2", "assistant", "你可以试试练瑜伽，对身体很好。"),
    ("z3", "user", "我对海鲜过敏。我妹妹明天来上海看我。好的，谢谢！明天天气怎么样？"),
    at=datetime(2025, 3, 14, 22, 0, tzinfo=SHANGHAI),
)


def test_chinese_in_chinese_out_verbatim() -> None:
    result = rules(CHINESE)
    tea = by_text(result, "茶")
    assert tea.value == "我喜欢喝茶，尤其是绿茶。"
    assert tea.memory_type == "UserMemory"
    allergy = by_text(result, "海鲜")
    assert allergy.value == "我对海鲜过敏。"
    assert allergy.memory_type == "UserMemory"
    for memory in result.memories:
        assert "用户" not in memory.value
        assert memory.value.endswith("。")
    assert result.summary.startswith("我喜欢喝茶，尤其是绿茶。我下周[2025-03-17那一周]")


def test_chinese_relative_dates_use_the_local_date_of_the_message() -> None:
    # 22:00 in Shanghai on the 14th is 14:00 UTC; "明天" is the 15th either way,
    # but "下周" must be the week after the 14th, starting Monday the 17th.
    result = rules(CHINESE)
    trip = by_text(result, "北京")
    assert trip.memory_type == "LongTermMemory"
    assert trip.value == "我下周[2025-03-17那一周]要去北京出差。"
    assert trip.memory_time == "2025-03-17"
    visit = by_text(result, "妹妹")
    assert visit.value == "我妹妹明天[2025-03-15]来上海看我。"
    assert visit.memory_time == "2025-03-15"
    late = chat(
        ("x", "user", "我昨天去医院看牙医了。"), at=datetime(2025, 3, 1, 0, 30, tzinfo=SHANGHAI)
    )  # UTC: Feb 28, 16:30
    [memory] = rules(late).memories
    assert memory.memory_time == "2025-02-28"
    assert memory.value == "我昨天[2025-02-28]去医院看牙医了。"


def test_chinese_tags_provenance_and_no_assistant_content() -> None:
    result = rules(CHINESE)
    assert {"喝茶", "绿茶"} <= set(by_text(result, "茶").tags)
    assert {"北京", "出差"} <= set(by_text(result, "北京").tags)
    assert "海鲜" in by_text(result, "海鲜").tags
    for memory in result.memories:
        assert len(memory.tags) >= 2, memory
        assert memory.key and len(memory.key) <= 12
        assert memory.key.replace("我", "") in memory.value.replace("我", "").split("[")[0] or (
            "[" in memory.value
        )
    assert by_text(result, "北京").key == "下周要去北京出差"
    assert by_text(result, "海鲜").source_message_ids == ["z3"]
    assert not [m for m in result.memories if "瑜伽" in m.value]
    assert not [m for m in result.memories if "谢谢" in m.value or "天气" in m.value]
    assert len(result.memories) == 4


def test_japanese_korean_and_accented_latin_keep_their_own_script() -> None:
    result = rules(
        chat(
            ("j", "user", "私は毎朝コーヒーを飲みます。"),
            ("k", "user", "저는 서울에 살고 있어요."),
            ("d", "user", "Ich wohne in München."),
            ("f", "user", "J'adore le café au lait."),
        )
    )
    assert [m.value for m in result.memories] == [
        "私は毎朝コーヒーを飲みます。",
        "저는 서울에 살고 있어요.",
        "Ich wohne in München.",
        "J'adore le café au lait.",
    ]
    ja, ko, de, fr = result.memories
    assert ja.tags == ["毎朝", "コーヒー"]
    assert ko.tags == ["서울에", "살고", "있어요"]
    assert de.tags == ["wohne", "münchen"]
    assert fr.tags == ["j'adore", "café", "lait"]
    assert de.key == "Ich wohne in München"


def test_document_chunks_become_long_term_memories_per_paragraph() -> None:
    text = (
        "Onboarding\n\n"
        "New employees receive a laptop on their first day. The IT desk is on floor 3.\n\n"
        "Expense reports are due by the fifth working day of each month.\n\n"
        "公司的年假为每年十五天，需要提前两周申请。"
    )
    ctx = ExtractionContext(
        kind="doc",
        user_id="u1",
        now=FRIDAY,
        document_text=text,
        doc_id="handbook",
        char_start=0,
        char_end=len(text),
    )
    result = rules(ctx)
    assert [m.memory_type for m in result.memories] == ["LongTermMemory"] * 3
    laptop, expenses, leave = result.memories
    assert laptop.value == (
        "New employees receive a laptop on their first day. The IT desk is on floor 3."
    )
    assert laptop.key == "Onboarding"  # the heading names the paragraph under it
    assert "expense" in expenses.tags and "reports" in expenses.tags
    assert leave.value.startswith("公司的年假")
    assert all(m.source_message_ids == [] for m in result.memories)


def test_empty_of_substance_gives_no_memories() -> None:
    result = rules(chat(("m1", "user", "ok thanks!"), ("m2", "user", "好的，谢谢！")))
    assert result.memories == []
    assert result.summary == ""


async def test_rules_provider_runs_the_stand_in_and_announces_itself(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch,
) -> None:
    import memstream.streams.llm.rules as rules_module

    monkeypatch.setattr(rules_module, "_warned", False)  # as in a fresh process
    with caplog.at_level(logging.WARNING):
        llm = RulesLLM()
    assert any("not a language model" in r.message for r in caplog.records)
    result = await llm.run(EXTRACTION, ENGLISH)
    assert result == rules(ENGLISH)
    assert llm.usage.calls == 1 and llm.usage_by_task["extraction"].calls == 1


async def test_rules_provider_turns_stand_in_failures_into_llm_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(ctx: ExtractionContext) -> ExtractionResponse:
        raise ValueError("cannot handle this")

    task: Task[ExtractionContext, ExtractionResponse] = Task(
        "broken", EXTRACTION.render, ExtractionResponse
    )
    monkeypatch.setitem(STAND_INS, "broken", broken)
    llm = RulesLLM()
    with pytest.raises(LLMError, match="cannot handle this"):
        await llm.run(task, ENGLISH)
    assert llm.usage.failures == 1


@pytest.mark.parametrize(("said", "kept"), [
    ("ok so my landlord in Sacramento finally fixed the heater lol, only took 3 weeks 🙄 anyway "
     "whats a good slow cooker recipe for a tiny apartment kitchen?",
     "my landlord in Sacramento finally fixed the heater lol, only took 3 weeks 🙄"),
    ("I teach 8th grade science in Columbus, any fun experiment ideas for a unit on density?",
     "I teach 8th grade science in Columbus"),
    ("我住在台北，最近房租又涨了，有什么找房子的网站推荐吗", "我住在台北，最近房租又涨了"),
    ("我最近开始吃素了，有什么好吃的素菜推荐吗？", "我最近开始吃素了"),
    # the clause that asks says so with no question word: the question mark ends it
    ("住在深圳南山，每天去福田上班，坐地铁还是打车划算？", "住在深圳南山，每天去福田上班"),
    ("在阿里做前端三年了，想提升一下系统设计能力，推荐几本书？",
     "在阿里做前端三年了，想提升一下系统设计能力"),
    ("my boyfriend Marcus's bday is next week, gift ideas under $100?",
     "my boyfriend Marcus's bday is next week [week of 2025-03-17]"),
    # 不怎么 ("not much"), 没什么 ("hardly any") and 哪怕 ("even if") do not ask
    ("我家猫最近不怎么吃东西，一直趴着，是不是病了？", "我家猫最近不怎么吃东西，一直趴着"),
    ("我最近没什么胃口，晚饭只喝粥，要去看医生吗", "我最近没什么胃口，晚饭只喝粥"),
])
def test_what_is_told_before_a_question_in_one_sentence_is_kept(said: str, kept: str) -> None:
    assert [m.value for m in rules(chat(("m1", "user", said))).memories] == [kept]


@pytest.mark.parametrize("asked", [
    "is it bad that I'm up to like a pack a day again?",
    "What do you think about hiking?",
    "对了，年终总结怎么写？",
    "你觉得我应该学法语吗",
    "你觉得我该不该辞职？",
    "can u help me write a slack msg to my manager asking for friday off?",
])
def test_a_sentence_that_only_asks_is_still_skipped(asked: str) -> None:
    assert rules(chat(("m1", "user", asked))).memories == []


@pytest.mark.parametrize("said", ["我最近开始吃素了，因为想更健康一点。", "我已经习惯早起了。",
                                  "我现在很喜欢喝乌龙茶。"])
def test_a_habit_or_liking_said_to_have_begun_is_about_the_user(said: str) -> None:
    """最近/开始/已经/现在 before a habit, a trait or a liking still make it the user's own (a
    user memory, which working memory and the profile read), not a passing event."""
    memories = rules(chat(("m1", "user", said))).memories
    assert [m.memory_type for m in memories] == ["UserMemory"]
