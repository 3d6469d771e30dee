"""The batched merge review's answer model (streams/prompts/review.py): it reads what models
write."""

from __future__ import annotations

from memstream.streams.prompts.review import ReviewResponse


def test_review_answers_are_read_leniently() -> None:
    answer = ReviewResponse.model_validate({"decisions": [
        {"item": 0, "candidate": None, "relation": "duplicate"},  # names no candidate
        {"item": 1, "candidate": 0, "relation": "Contradiction", "reason": None,
         "memory": " The user moved. ", "tags": "move, city"}]})
    assert answer.decision_for(0, 1) is None
    second = answer.decision_for(1, 1)
    assert second is not None and second.relation == "contradictory"
    assert second.fused() is not None and second.fused().tags == ["move", "city"]  # type: ignore[union-attr]
    assert answer.decision_for(1, 0) is None  # a candidate out of range is no decision
    assert ReviewResponse.model_validate({"decisions": None}).decisions == []
