"""The batched tasks (merge review, organize, cluster summaries): their contexts refuse what
names nothing, their answers read what models write, and their rules stand-ins answer as the
per-pair stand-ins they are built from."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from memstream.streams.llm.rules import stand_in
from memstream.streams.prompts.conflict import RELATION_JUDGE, JudgeContext, MemoryStatement
from memstream.streams.prompts.organize import ORGANIZE, OrganizeContext, OrganizeResponse
from memstream.streams.prompts.relations import (
    RELATION_DETECTOR,
    RelationContext,
    RelationNode,
)
from memstream.streams.prompts.review import (
    REVIEW,
    Candidate,
    ReviewContext,
    ReviewItem,
    ReviewResponse,
)
from memstream.streams.prompts.summaries import CLUSTER_SUMMARIES, SummariesContext
from memstream.streams.prompts.summary import SummaryContext

T0 = datetime(2026, 3, 1, 9, tzinfo=UTC)


def stmt(text: str, day: int = 0) -> MemoryStatement:
    return MemoryStatement(text=text, updated_at=T0 + timedelta(days=day))


def node(text: str, day: int = 0, tags: tuple[str, ...] = ()) -> RelationNode:
    return RelationNode(text=text, tags=list(tags), updated_at=T0 + timedelta(days=day),
                        session_id="s")


def test_the_review_answers_each_item_as_the_pair_judge_would() -> None:
    items = [("Alice lives in Berlin.", "Alice moved to Lisbon."),
             ("The user likes green tea.", "The user plays the cello on Sundays.")]
    ctx = ReviewContext(items=[ReviewItem(new=stmt(new, 1), candidates=[
        Candidate(statement=stmt(old), similarity=0.9)]) for old, new in items])
    answer = stand_in(REVIEW)(ctx)
    for i, (old, new) in enumerate(items):
        single = stand_in(RELATION_JUDGE)(JudgeContext(existing=stmt(old), new=stmt(new, 1),
                                                       similarity=0.9))
        decision = answer.decision_for(i, 1)
        assert (decision.relation if decision else "independent") == single.relation
    merged = answer.decision_for(0, 1)
    assert merged is not None and merged.fused() is not None
    assert "Lisbon" in merged.fused().memory  # type: ignore[union-attr]
    user = REVIEW.render(ctx)[-1]["content"]
    assert user.count("NEW memory") == 2 and "similarity 0.900" in user


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


def test_organize_answers_each_pair_as_the_pair_detector_would() -> None:
    memories = [node("The user's flight to Berlin was delayed by three hours.", 0,
                     ("flight", "berlin")),
                node("The user missed the client meeting in Berlin because of the flight "
                     "delay.", 1, ("meeting", "berlin")),
                node("The user bought a blue scarf.", 2, ("scarf",))]
    ctx = OrganizeContext(memories=memories, pairs=[(1, 0), (2, 0)])
    answer = stand_in(ORGANIZE)(ctx)
    for n, (a, b) in enumerate(ctx.pairs):
        single = stand_in(RELATION_DETECTOR)(RelationContext(new=memories[a], old=memories[b]))
        link = answer.link_for(n)
        assert (link.relation if link else "NONE") == single.relation
    assert answer.link_for(0) is not None and answer.link_for(1) is None
    user = ORGANIZE.render(ctx)[-1]["content"]
    assert "pair 0: [1] (new) with [0] (earlier), same session" in user
    with pytest.raises(ValidationError):
        OrganizeContext(memories=memories, pairs=[(0, 0)])
    with pytest.raises(ValidationError):
        OrganizeContext(memories=memories, pairs=[(0, 7)])


def test_organize_answers_are_read_leniently() -> None:
    answer = OrganizeResponse.model_validate({"links": [
        {"pair": 0, "relation": "causes", "direction": "NEW -> OLD",
         "inferred": "the user will rebook"},
        {"pair": 1, "relation": "none"}], "concepts": None})
    link = answer.link_for(0)
    assert link is not None and link.relation == "CAUSE" and link.direction == "new_to_old"
    assert link.inferred == "It can be inferred that the user will rebook"
    assert answer.link_for(1) is None and answer.concepts == []


def test_cluster_summaries_one_per_cluster_of_one_level() -> None:
    from memstream.streams.prompts.members import MemberNote

    clusters = [SummaryContext(members=[MemberNote(text=t, tags=["tea"]) for t in texts])
                for texts in (["The user drinks green tea.", "The user likes sencha."],
                              ["The user runs on Sundays.", "The user ran a 10k in May."])]
    answer = stand_in(CLUSTER_SUMMARIES)(SummariesContext(clusters=clusters))
    assert [s.cluster for s in answer.summaries] == [0, 1]
    assert answer.summary_for(1) is not None and answer.summary_for(2) is None
    with pytest.raises(ValidationError):
        SummariesContext(level="topic", clusters=clusters)  # concept clusters
