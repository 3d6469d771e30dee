"""The relation judge as a model task (streams/prompts/conflict.py): its prompt and the
answers it accepts."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from memstream.streams.prompts.conflict import (
    RELATION_JUDGE,
    JudgeContext,
    JudgeResponse,
    render,
)
from tests.support.statements import T0, T1, judge_context, mem

# --------------------------------------------------------------------------- response models


def test_judge_response_accepts_common_spellings_and_rejects_others() -> None:
    spelled = JudgeResponse.model_validate({"relation": " Contradiction", "reason": None})
    assert spelled.relation == "contradictory" and spelled.reason == ""
    assert JudgeResponse.model_validate({"relation": "duplicate"}).relation == "redundant"
    with pytest.raises(ValidationError):
        JudgeResponse.model_validate({"relation": "maybe"})
    long = JudgeResponse.model_validate({"relation": "independent", "reason": "x " * 400})
    assert len(long.reason) <= 300


# --------------------------------------------------------------------------- prompts


def test_judge_prompt_shows_both_statements_labels_and_language_rule() -> None:
    ctx = JudgeContext(existing=mem("用户住在柏林。", T0, key="居住地", tags=["柏林"]),
                       new=mem("The user moved to Lisbon.", T1), similarity=0.8123)
    messages = RELATION_JUDGE.render(ctx)
    assert [m["role"] for m in messages] == ["system", "user"]
    system, user = messages[0]["content"], messages[1]["content"]
    for label in ('"redundant"', '"contradictory"', '"independent"'):
        assert label in system
    assert "change over time" in system and "different subjects" in system
    assert "Chinese" in system and "translation" in system
    assert "用户住在柏林。" in user and "The user moved to Lisbon." in user
    assert "居住地" in user and T0.isoformat(timespec="minutes") in user
    assert "0.812" in user and "NEW memory is the more recent" in user
    assert messages == RELATION_JUDGE.render(ctx)


def test_the_model_prompt_says_different_subjects_are_independent_and_shows_entities() -> None:
    system, user = render(judge_context("Anna lives in Paris.", "Boris lives in Rome.", 0.9,
                              ("Anna", "Paris"), ("Boris", "Rome")))
    assert "different subjects they are independent" in system["content"]
    assert "entities: Anna, Paris" in user["content"]
    assert "entities: Boris, Rome" in user["content"]
