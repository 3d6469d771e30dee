"""The rules relation detector (streams/llm/rules/relations.py): causes, conditions and
relations from cues and shared subjects, never a conflict."""

from __future__ import annotations

import pytest

from memstream.streams.llm.rules import RulesLLM
from memstream.streams.llm.rules.relations import rules
from memstream.streams.prompts.relations import RELATION_DETECTOR, RelationResponse
from tests.support.relation_nodes import (
    BOOKED,
    DELAY,
    MISSED,
    ZH_BOOKED,
    ZH_DELAY,
    ZH_MISSED,
    node,
    pair,
)

# --------------------------------------------------------------------------- rules: CAUSE


def test_the_delay_caused_the_missed_meeting() -> None:
    answer = rules(pair(MISSED, DELAY))
    assert answer.relation == "CAUSE"
    assert answer.direction == "old_to_new"  # the stored delay caused the new missed meeting
    assert "flight delay" in answer.reason


def test_the_cause_is_found_whichever_memory_arrives_first() -> None:
    # The user mentions the missed meeting first and explains the delay later: the cue, not
    # the arrival order, says which is the cause.
    answer = rules(pair(node(DELAY.text, hours=5), MISSED))
    assert (answer.relation, answer.direction) == ("CAUSE", "new_to_old")


def test_a_booking_of_the_same_flight_only_relates() -> None:
    for new, old in [(BOOKED, DELAY), (DELAY, BOOKED), (MISSED, BOOKED), (BOOKED, MISSED)]:
        answer = rules(pair(new, old))
        assert answer.relation == "RELATE", (new.text, old.text)
        assert answer.direction is None


def test_chinese_trip_conversation() -> None:
    answer = rules(pair(ZH_MISSED, ZH_DELAY))
    assert (answer.relation, answer.direction) == ("CAUSE", "old_to_new")
    assert "航班延误" in answer.reason and "旧记忆" in answer.reason
    assert rules(pair(ZH_BOOKED, ZH_DELAY)).relation == "RELATE"
    assert rules(pair(ZH_MISSED, ZH_BOOKED)).relation == "RELATE"


@pytest.mark.parametrize(
    ("effect", "cause", "tags"),
    [
        ("The user missed the meeting after the three-hour flight delay.",
         "The user's flight to Berlin was delayed by three hours.", []),
        ("The user's train to Munich was cancelled.",
         "Heavy snow hit Munich on Friday, which led to the cancellation of the user's train.",
         []),
        ("The user stayed home on Saturday due to the storm in Hamburg.",
         "A storm hit Hamburg on Saturday.", []),
        # A one-word cause ("下大雨") also needs a shared subject: here the city tag.
        ("由于下大雨，用户取消了周六在杭州的徒步。", "周六杭州下大雨。", ["杭州"]),
        ("用户这周没有去跑步。", "用户扭伤了脚踝，所以这周没有去跑步。", []),
    ],
)
def test_causal_cues_in_either_memory(effect: str, cause: str, tags: list[str]) -> None:
    answer = rules(pair(node(effect, hours=3, tags=tags), node(cause, hours=1, tags=tags)))
    assert (answer.relation, answer.direction) == ("CAUSE", "old_to_new")
    flipped = rules(pair(node(cause, hours=3, tags=tags), node(effect, hours=1, tags=tags)))
    assert (flipped.relation, flipped.direction) == ("CAUSE", "new_to_old")


def test_a_causal_cue_about_something_else_is_not_a_cause() -> None:
    tired = node("The user was tired because of the long hike in the Alps.")
    assert rules(pair(tired, DELAY)).relation == "NONE"
    # Both memories give the same cause: they share it, neither caused the other.
    upset = node("The user was upset because of the flight delay.", tags=["berlin"])
    assert rules(pair(upset, MISSED)).relation != "CAUSE"


def test_mutual_causes_fall_back_to_time_order() -> None:
    # Each memory names the other as its cause; the earlier event is taken as the cause.
    a = node("The user skipped lunch because of the deadline stress.", hours=1)
    b = node("The user felt deadline stress because the user skipped lunch.", hours=4)
    assert (rules(pair(b, a)).relation, rules(pair(b, a)).direction) == ("CAUSE", "old_to_new")
    assert rules(pair(a, b)).direction == "new_to_old"


# --------------------------------------------------------------------------- rules: CONDITION


@pytest.mark.parametrize(
    ("conditional", "condition"),
    [
        ("If it rains on Saturday, the user will cancel the hike.",
         "The forecast says it will rain on Saturday."),
        ("The user will cancel the hike if it rains on Saturday.",
         "It is going to rain on Saturday."),
        ("The user can take the job in Munich only if the visa is approved.",
         "The user's visa for Germany was approved."),
        ("只有老板批准，用户才能下周请假。", "老板批准了用户的请假。"),
        ("如果周六天气好，用户就去爬山。", "周六天气很好。"),
    ],
)
def test_conditional_cues(conditional: str, condition: str) -> None:
    answer = rules(pair(node(conditional, hours=2), node(condition, hours=1)))
    assert (answer.relation, answer.direction) == ("CONDITION", "old_to_new")
    flipped = rules(pair(node(condition), node(conditional)))
    assert (flipped.relation, flipped.direction) == ("CONDITION", "new_to_old")


def test_two_memories_with_the_same_condition_are_not_conditions_of_each_other() -> None:
    a = node("If it rains on Saturday, the user will cancel the hike.")
    b = node("If it rains on Saturday, the user will stay at home and read.")
    assert rules(pair(a, b)).relation != "CONDITION"


# --------------------------------------------------------------------------- rules: RELATE / NONE


def test_relate_needs_a_named_entity_or_two_subject_tags() -> None:
    two_tags = rules(pair(node("The user runs every morning.", tags=["running", "fitness"]),
                          node("The user signed up for a marathon.", tags=["running", "fitness"])))
    assert two_tags.relation == "RELATE"
    one_tag = rules(pair(node("The user runs every morning.", tags=["running", "morning"]),
                         node("The user signed up for a marathon.", tags=["running", "race"])))
    assert one_tag.relation == "NONE"
    # Given entities count as well as names found in the text.
    entity = rules(pair(node("The user's manager praised the demo.", entities=["Thomas"]),
                        node("Thomas is moving to the London office.")))
    assert entity.relation == "RELATE" and "thomas" in entity.reason


def test_generic_tags_never_relate() -> None:
    answer = rules(pair(node("The user likes jazz.", tags=["preference", "user", "music"]),
                        node("The user likes sushi.", tags=["preference", "user", "food"])))
    assert answer.relation == "NONE"
    zh = rules(pair(node("用户喜欢爵士乐。", tags=["偏好", "计划", "音乐"]),
                    node("用户喜欢寿司。", tags=["偏好", "计划", "食物"])))
    assert zh.relation == "NONE" and zh.reason.startswith("没有")


def test_rules_never_claim_a_conflict() -> None:
    # Contradictions are the merge stage's; the rules do not label them CONFLICT.
    for new, old in [("The user moved to Lisbon.", "The user lives in Lisbon's suburbs."),
                     ("用户现在有三只猫。", "用户有两只猫。"),
                     ("The user no longer works at Google.", "The user works at Google.")]:
        assert rules(pair(node(new), node(old))).relation != "CONFLICT"


async def test_rules_provider_runs_the_detector() -> None:
    answer = await RulesLLM().run(RELATION_DETECTOR, pair(MISSED, DELAY))
    assert isinstance(answer, RelationResponse) and answer.relation == "CAUSE"
