"""The rules stand-in for cluster summaries (streams/llm/rules/summary.py): the most central
members quoted verbatim, titled in whole words."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from memstream.streams.llm.rules.summary import rules as rules_summary
from memstream.streams.prompts.summary import SummaryContext
from tests.support.members import HIKING, ZH_COOKING, m, quoted


def test_summary_quotes_the_most_central_members_verbatim() -> None:
    answer = rules_summary(SummaryContext(members=HIKING, level="concept"))
    # "preference" is as common as "mountains" but says nothing about the subject.
    assert answer.key == "hiking · mountains"
    assert answer.tags[:2] == ["hiking", "mountains"] and "preference" not in answer.tags
    # about half the members: those sharing the most subject tags with the others (the
    # first three tie; the hut-to-hut tour shares one), in their order
    assert quoted(answer.value, HIKING) == [HIKING[0].text, HIKING[1].text]
    assert answer.background == (
        "Summary of 4 memories (extractive, no model): the 2 most central quoted verbatim.")


def test_centrality_from_the_optimizer_decides_what_is_quoted() -> None:
    answer = rules_summary(SummaryContext(members=HIKING, centrality=[0.1, 0.9, 0.2, 0.8]))
    assert quoted(answer.value, HIKING) == [HIKING[1].text, HIKING[3].text]
    with pytest.raises(ValidationError, match="centrality has 2 scores for 4 members"):
        SummaryContext(members=HIKING, centrality=[0.1, 0.2])


def test_chinese_cluster_gets_a_chinese_summary() -> None:
    answer = rules_summary(SummaryContext(members=ZH_COOKING, level="concept"))
    assert answer.key.startswith("做饭")
    assert quoted(answer.value, ZH_COOKING)[0] == ZH_COOKING[0].text
    assert "。用户" in answer.value  # Chinese sentences follow each other without a space
    assert answer.background.startswith("汇总了4条记忆（抽取式，无模型）")
    assert "偏好" not in answer.tags


def test_a_mixed_language_cluster_is_quoted_never_spliced() -> None:
    members = [
        m("lives Berlin works nurse", "lives Berlin works nurse", "berlin", "live"),
        m("养了一只叫小白的猫它三岁", "养了一只叫小白的猫它三岁", "猫", "小白"),
        m("The user lives in Berlin and works as a nurse.", "", "berlin", "nurse"),
        m("用户的猫小白喜欢晒太阳。", "", "猫", "小白"),
    ]
    answer = rules_summary(SummaryContext(members=members, centrality=[0.5, 0.9, 0.8, 0.1]))
    # each statement whole, in its own language, an end mark added where one was missing
    assert quoted(answer.value, members) == [
        "养了一只叫小白的猫它三岁。", "The user lives in Berlin and works as a nurse."]
    assert answer.value == ("养了一只叫小白的猫它三岁。"
                            "The user lives in Berlin and works as a nurse.")
    assert "Memories about" not in answer.value and ";" not in answer.value
    assert answer.key == "Berlin · 猫 · 小白"


def test_title_words_are_whole_words_spelled_as_the_members_write_them() -> None:
    members = [
        m("The user moved to Berlin in 2023.", "", "berlin", "mov", "nursing"),
        m("The user works night shifts in a Berlin hospital.", "", "berlin", "nursing"),
        m("The user adopted two cats.", "", "cats", "berlin"),
    ]
    answer = rules_summary(SummaryContext(members=members))
    assert answer.key == "Berlin · nursing"  # "cats" is on one member only
    assert answer.tags == ["berlin", "nursing", "cats"]  # "mov" is a cut word


def test_a_third_title_tag_needs_more_than_one_member() -> None:
    members = [
        m("The user runs 10 km on Sundays.", "Sunday run", "running", "fitness", "sunday"),
        m("The user signed up for the Berlin marathon.", "Berlin marathon", "running",
          "fitness", "marathon"),
        m("The user bought running shoes.", "running shoes", "running", "gear", "marathon"),
    ]
    assert rules_summary(SummaryContext(members=members)).key == "running · fitness · marathon"
    assert rules_summary(SummaryContext(members=members[:2])).key == "running · fitness"


def test_untagged_members_are_titled_from_their_text() -> None:
    members = [m("The user adopted a cat named Miso."), m("Miso the cat sleeps on the sofa.")]
    answer = rules_summary(SummaryContext(members=members))
    assert answer.key == "cat · Miso"
    assert quoted(answer.value, members) == [members[0].text]


def test_long_members_are_quoted_by_their_first_whole_sentence() -> None:
    long = ("The user met Dr. Smith at 3 p.m. about the knee. " + "She said a lot. " * 20).strip()
    members = [m(long, "", "knee", "doctor"), m("The user's knee hurts after running.", "",
                                                 "knee", "doctor")]
    answer = rules_summary(SummaryContext(members=members, centrality=[0.9, 0.1]))
    assert answer.value == "The user met Dr. Smith at 3 p.m. about the knee."


def test_large_clusters_quote_at_most_three_members() -> None:
    members = [m(f"The user visited museum number {i} in Paris.", f"museum {i}", "museums",
                 "paris") for i in range(12)]
    answer = rules_summary(SummaryContext(members=members))
    assert len(quoted(answer.value, members)) == 3
    assert answer.background.startswith("Summary of 12 memories (extractive, no model)")


def test_topic_level_quotes_the_lead_sentence_of_each_concept() -> None:
    concepts = [m("The user hiked the Zugspitze. The user bought new boots.", "hiking", "hiking"),
                m("The user skis in Austria every winter. The user owns two pairs of skis.",
                  "skiing", "skiing", "winter"),
                m("The user swims twice a week.", "swimming", "swimming")]
    answer = rules_summary(SummaryContext(members=concepts, level="topic",
                                          centrality=[0.9, 0.8, 0.1]))
    assert answer.value == "The user hiked the Zugspitze. The user skis in Austria every winter."
    assert answer.background == (
        "Summary of 3 concepts (extractive, no model): the 2 most central quoted verbatim.")
    zh = rules_summary(SummaryContext(members=[m("用户喜欢做饭。用户会包饺子。", "做饭", "做饭")],
                                      level="topic"))
    assert zh.value == "用户喜欢做饭。" and zh.background.startswith("汇总了1个概念")
