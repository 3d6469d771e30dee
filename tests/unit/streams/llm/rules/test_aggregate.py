"""The rules stand-in for concept aggregation (streams/llm/rules/aggregate.py): a concept
for members sharing subject tags, none for trivial overlaps."""

from __future__ import annotations

import pytest

from memstream.streams.llm.rules import RulesLLM
from memstream.streams.llm.rules.aggregate import rules as rules_aggregate
from memstream.streams.prompts.aggregate import AGGREGATE, AggregateContext
from memstream.streams.prompts.members import MemberNote
from tests.support.members import HIKING, ZH_COOKING, m, quoted


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
