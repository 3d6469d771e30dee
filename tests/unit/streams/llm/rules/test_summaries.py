"""The rules stand-in of the batched cluster summaries (streams/llm/rules/summaries.py): one
summary per cluster of one level."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from memstream.streams.llm.rules import stand_in
from memstream.streams.prompts.summaries import CLUSTER_SUMMARIES, SummariesContext
from memstream.streams.prompts.summary import SummaryContext


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
