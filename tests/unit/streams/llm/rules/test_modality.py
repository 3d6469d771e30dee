"""The cues the rules judge holds back on: plans, trips and relative times."""

from __future__ import annotations

import pytest

from memstream.streams.llm.rules.conflict import judge
from memstream.streams.llm.rules.modality import held_back, mood, when


@pytest.mark.parametrize(("text", "expected"), [
    ("I live in Munich.", "fact"),
    ("I plan to move to Berlin next year.", "plan"),
    ("The user goes running every morning before going to work.", "fact"),
    ("我下周要去上海出差，住在外滩附近。", "trip"),
    ("I'm flying to Tokyo next week for a conference.", "trip"),
    ("我打算明年搬到深圳。", "plan"),
    ("We booked a flight for May 14.", "trip"),
    ("分手以后一个人过周末有点不习惯。", "fact"),  # after a deed, 以后 is "after"
    ("搬到了苏州以后发现小区里能遛狗的地方好少。", "fact"),
    ("以后我想当老师。", "plan"),  # opening a clause, "later on"
    ("我们以后去海边住。", "plan"),
])
def test_mood(text: str, expected: str) -> None:
    assert mood(text) == expected


def test_relative_times_fold_across_languages() -> None:
    assert when("I will visit my parents next weekend.") == {"weekend+1"}
    assert when("我下周要去上海出差。") == {"week+1"} == when("Next week I fly to Shanghai.")
    assert when("用户的女儿今年六岁。") == frozenset()  # an age, not an occasion


def test_a_negation_still_ends_a_plan() -> None:
    assert held_back("The user plans to move to Canada in 2025.",
                     "The user decided not to move to Canada.", opposite=True) is None
    assert judge("The user plans to move to Canada in 2025.",
                 "The user decided not to move to Canada.", 0.86, 0.92).relation \
        == "contradictory"


def test_a_dated_and_an_undated_statement_are_not_merged() -> None:
    assert judge("The user lives in Lyon.", "The user lived in Lyon in 2019.", 0.95,
                 0.92).relation != "redundant"
    assert judge("I went hiking.", "I went hiking yesterday.", 0.95, 0.92).relation \
        != "redundant"
