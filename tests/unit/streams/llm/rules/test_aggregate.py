"""The rules stand-in for concept aggregation (streams/llm/rules/aggregate.py): a concept
for members sharing subject tags, none for trivial overlaps."""

from __future__ import annotations

import pytest

from memstream.streams.llm.rules import RulesLLM
from memstream.streams.llm.rules.aggregate import rules as rules_aggregate
from memstream.streams.prompts.aggregate import AGGREGATE, AggregateContext
from memstream.streams.prompts.members import MemberNote, statement


def m(text: str, key: str = "", *tags: str) -> MemberNote:
    return MemberNote(text=text, key=key, tags=list(tags))


HIKING = [
    m("The user hiked the Zugspitze in July 2024.", "Zugspitze hike", "hiking", "mountains",
      "preference"),
    m("The user bought new hiking boots for the Alps.", "new hiking boots", "Hiking", "gear",
      "mountains"),
    m("The user plans to climb Mont Blanc next summer.", "Mont Blanc plan", "mountains",
      "hiking", "plan"),
    m("The user prefers hut-to-hut tours over camping.", "hut-to-hut tours", "hiking",
      "preference"),
]
ZH_COOKING = [
    m("用户周末喜欢包饺子，最爱韭菜鸡蛋馅。", "周末包饺子", "饺子", "做饭", "偏好"),
    m("用户最近在学做川菜，已经会做麻婆豆腐了。", "学做川菜", "川菜", "做饭", "学习"),
    m("用户每天早上自己煮粥。", "早上煮粥", "早餐", "做饭", "习惯"),
    m("用户做菜从来不放辣椒。", "做菜不放辣", "做饭", "辣椒", "偏好"),
]


# --------------------------------------------------------------------------- cluster summary


def quoted(value: str, members: list[MemberNote]) -> list[str]:
    """The member texts a value consists of, in order; fails if anything else is in it."""
    statements = [statement(mb.text) for mb in members]
    found: list[str] = []
    rest = value
    while rest:
        head = next((t for t in statements if rest.startswith(t)), None)
        assert head is not None, f"not a verbatim member statement: {rest!r}"
        found.append(head)
        rest = rest[len(head):].lstrip(" ")
    return found


# --------------------------------------------------------------------------- aggregate


def test_aggregate_three_members_sharing_two_subject_tags() -> None:
    answer = rules_aggregate(AggregateContext(members=HIKING, shared_tags=["hiking"]))
    assert answer.create
    assert answer.key == "hiking · mountains"
    # Only the three members that carry both tags are in the concept; two of them are quoted.
    holders = HIKING[:3]
    assert quoted(answer.value, holders) == [HIKING[0].text, HIKING[1].text]
    assert answer.tags == ["hiking", "mountains"]
    assert answer.background == (
        "Concept over 3 memories sharing the tags hiking, mountains (extractive, no model): "
        "the 2 most central quoted verbatim.")
    central = rules_aggregate(AggregateContext(members=HIKING, shared_tags=["hiking"],
                                               centrality=[0.1, 0.2, 0.9, 1.0]))
    # the hut-to-hut member is the most central but does not carry both tags
    assert quoted(central.value, holders) == [HIKING[2].text, HIKING[1].text]


@pytest.mark.parametrize(
    "members",
    [
        # generic tags only
        [m("The user likes jazz.", "jazz", "preference", "user", "music"),
         m("The user likes sushi.", "sushi", "preference", "user", "food"),
         m("The user likes cats.", "cats", "preference", "user", "animals")],
        # two subject tags, but on two members only
        HIKING[:2] + [m("The user likes sushi.", "sushi", "food", "preference")],
        # three members, one subject tag in common
        [m("The user runs on Sundays.", "run", "running", "sunday"),
         m("The user runs a marathon in May.", "marathon", "running", "race"),
         m("The user bought running shoes.", "shoes", "running", "gear")],
    ],
)
def test_aggregate_declines_trivial_overlaps(members: list[MemberNote]) -> None:
    answer = rules_aggregate(AggregateContext(members=members, shared_tags=["preference"]))
    assert answer.create is False and answer.value == ""


def test_aggregate_in_chinese() -> None:
    members = [*ZH_COOKING[:3], m("用户周末常做饺子。", "做饺子", "饺子", "做饭")]
    answer = rules_aggregate(AggregateContext(members=members, shared_tags=["做饭", "饺子"]))
    assert not answer.create  # only two members carry both 做饭 and 饺子
    members.append(m("用户会包三种馅的饺子。", "三种馅饺子", "饺子", "做饭"))
    answer = rules_aggregate(AggregateContext(members=members, shared_tags=["做饭", "饺子"]))
    assert answer.create and answer.key == "做饭 · 饺子"
    assert len(quoted(answer.value, members)) == 2
    assert answer.background.startswith("汇总了3条共同带有标签做饭、饺子的记忆（抽取式，无模型）")


async def test_aggregate_through_the_rules_provider() -> None:
    answer = await RulesLLM().run(AGGREGATE, AggregateContext(members=HIKING))
    assert answer.create and answer.key == "hiking · mountains"
