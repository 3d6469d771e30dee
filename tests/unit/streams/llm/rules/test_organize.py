"""The rules stand-in of the batched organize task (streams/llm/rules/organize.py): it answers
each pair as the per-pair relation detector would."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from memstream.streams.llm.rules import stand_in
from memstream.streams.prompts.organize import ORGANIZE, OrganizeContext
from memstream.streams.prompts.relations import RELATION_DETECTOR, RelationContext, RelationNode

T0 = datetime(2026, 3, 1, 9, tzinfo=UTC)


def node(text: str, day: int = 0, tags: tuple[str, ...] = ()) -> RelationNode:
    return RelationNode(text=text, tags=list(tags), updated_at=T0 + timedelta(days=day),
                        session_id="s")


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
