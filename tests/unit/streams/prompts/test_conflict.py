"""The relation judge as a model task (streams/prompts/conflict.py): its prompt and the
answers it accepts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from memstream.streams.prompts.conflict import (
    RELATION_JUDGE,
    JudgeContext,
    JudgeResponse,
    MemoryStatement,
    render,
)

T0 = datetime(2024, 3, 1, 8, 30, tzinfo=UTC)
T1 = T0 + timedelta(days=40)


def mem(
    text: str, at: datetime = T0, key: str = "", tags: list[str] | None = None
) -> MemoryStatement:
    return MemoryStatement(text=text, key=key, tags=tags or [], updated_at=at)


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


def ctx(old: str, new: str, similarity: float = 0.95, old_entities: tuple[str, ...] = (),
        new_entities: tuple[str, ...] = ()) -> JudgeContext:
    return JudgeContext(
        existing=MemoryStatement(text=old, entities=list(old_entities), updated_at=T0),
        new=MemoryStatement(text=new, entities=list(new_entities),
                            updated_at=T0 + timedelta(days=30)),
        similarity=similarity, merge_threshold=0.92)


def test_the_model_prompt_says_different_subjects_are_independent_and_shows_entities() -> None:
    system, user = render(ctx("Anna lives in Paris.", "Boris lives in Rome.", 0.9,
                              ("Anna", "Paris"), ("Boris", "Rome")))
    assert "different subjects they are independent" in system["content"]
    assert "entities: Anna, Paris" in user["content"]
    assert "entities: Boris, Rome" in user["content"]
