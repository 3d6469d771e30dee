"""Concept aggregation as a model task (streams/prompts/aggregate.py): its prompt and the
answers it accepts."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from memstream.streams.prompts.aggregate import AggregateContext, AggregateResponse
from memstream.streams.prompts.aggregate import render as render_aggregate
from memstream.streams.prompts.members import MemberNote


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


def test_aggregate_response_validation() -> None:
    assert AggregateResponse.model_validate({"create": "no"}).create is False
    answer = AggregateResponse.model_validate(
        {"create": True, "key": None, "value": "The user hikes in the Alps.", "tags": "a, b"})
    assert answer.key == "The user hikes in the Alps." and answer.tags == ["a", "b"]
    with pytest.raises(ValidationError, match="no value"):
        AggregateResponse.model_validate({"create": True, "key": "k", "value": " "})


def test_aggregate_prompt() -> None:
    system, user = render_aggregate(AggregateContext(members=HIKING, shared_tags=["hiking"]))
    assert "Shared tags: hiking" in user["content"]
    assert all(member.text in user["content"] for member in HIKING)
    rules_text = system["content"]
    assert '"create": false when the overlap is trivial' in rules_text
    assert '"preference"' in rules_text and "merely share" in rules_text
    assert "The group is in English" in rules_text
    assert "JSON object and nothing else" in rules_text
    zh = render_aggregate(AggregateContext(members=ZH_COOKING))[0]["content"]
    assert "The group is in Chinese" in zh
