"""Memory statements and relation-judge questions, built the same way by the tests of the
judge and fusion prompts, their rules stand-ins and the subject guard."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from memstream.streams.prompts.conflict import JudgeContext, MemoryStatement
from tests.support.paths import DATA

T0 = datetime(2024, 3, 1, 8, 30, tzinfo=UTC)
T1 = T0 + timedelta(days=40)
# Pairs of statements about different subjects, or one subject at different times, that a
# judge must keep apart (labelled "independent", with their kind and language).
NEAR_MISS = DATA / "near_miss_pairs.jsonl"
NEAR_MISS_PAIRS: list[dict[str, Any]] = [
    json.loads(line) for line in NEAR_MISS.read_text(encoding="utf-8").splitlines() if line
]


def mem(
    text: str, at: datetime = T0, key: str = "", tags: list[str] | None = None
) -> MemoryStatement:
    return MemoryStatement(text=text, key=key, tags=tags or [], updated_at=at)


def judge_context(old: str, new: str, similarity: float = 0.95,
                  old_entities: tuple[str, ...] = (),
                  new_entities: tuple[str, ...] = ()) -> JudgeContext:
    """``new`` said 30 days after ``old``, judged at a merge threshold of 0.92."""
    return JudgeContext(
        existing=MemoryStatement(text=old, entities=list(old_entities), updated_at=T0),
        new=MemoryStatement(text=new, entities=list(new_entities),
                            updated_at=T0 + timedelta(days=30)),
        similarity=similarity, merge_threshold=0.92)
