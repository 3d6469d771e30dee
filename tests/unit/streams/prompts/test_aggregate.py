"""Concept aggregation as a model task (streams/prompts/aggregate.py): its prompt and the
answers it accepts."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from memstream.streams.prompts.aggregate import AggregateContext, AggregateResponse
from memstream.streams.prompts.aggregate import render as render_aggregate
from tests.support.members import HIKING, ZH_COOKING


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
