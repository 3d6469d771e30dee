"""Conflict detection and fusion for a chunk's new memories in one call.

Judging every (new, similar stored) pair on its own, then fusing each merged pair in a
second call, cost ~21 calls per turn on LoCoMo. ``ReviewContext`` lists each new memory of
one chunk with its merge candidates (stored memories above the conflict threshold, most
similar first); ``ReviewResponse`` names, per new memory, the candidate it contradicts or
repeats, if any, with the statement that replaces both. A new memory left out of the answer
is independent of its candidates. Labels and fusion rules are those of ``conflict`` and
``fusion``. Its ``rules`` stand-in is ``streams.llm.rules.review``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from memstream.streams.prompts.conflict import (
    LABEL_DEFINITIONS,
    JudgeResponse,
    MemoryStatement,
    ReviewRelation,
    describe_memory,
    review_relation,
)
from memstream.streams.prompts.fusion import FusionResponse
from memstream.streams.prompts.promptkit import ChatMessage, Task


class Candidate(BaseModel):
    """A stored memory the new one may repeat or contradict, and how close they are."""

    model_config = ConfigDict(frozen=True)

    statement: MemoryStatement
    similarity: float = Field(ge=-1.0, le=1.0)


class ReviewItem(BaseModel):
    model_config = ConfigDict(frozen=True)

    new: MemoryStatement
    candidates: list[Candidate] = Field(min_length=1)


class ReviewContext(BaseModel):
    """The chunk's new memories that have candidates, in log order."""

    model_config = ConfigDict(frozen=True)

    items: list[ReviewItem] = Field(min_length=1)
    merge_threshold: float = Field(default=0.92, ge=0.0, le=1.0)


class Decision(JudgeResponse):
    """For new memory ``item``: the ``candidate`` it repeats or contradicts, and when it does,
    the merged statement (``memory``, ``key``, ``tags``) that replaces both."""

    item: int = Field(ge=0)
    candidate: int | None = Field(default=None, ge=0)
    relation: ReviewRelation  # type: ignore[assignment]  # the judge's labels and one more
    memory: str = ""
    key: str = ""
    tags: list[str] = Field(default_factory=list)

    @field_validator("relation", mode="before")
    @classmethod
    def _review_alias(cls, value: Any) -> Any:
        return review_relation(value)

    @field_validator("memory", "key", mode="before")
    @classmethod
    def _text(cls, value: Any) -> Any:
        return "" if value is None else value.strip() if isinstance(value, str) else value

    @field_validator("tags", mode="before")
    @classmethod
    def _tags(cls, value: Any) -> Any:
        return FusionResponse.model_validate({"memory": "x", "tags": value}).tags

    @model_validator(mode="after")
    def _merge_names_a_candidate(self) -> Decision:
        if self.relation != "independent" and self.candidate is None:
            self.relation = "independent"
        return self

    def fused(self) -> FusionResponse | None:
        """The merged statement, or None when the answer gave none (fusion then falls back)."""
        if self.relation in ("independent", "supersedes") or not self.memory:
            return None
        return FusionResponse(memory=self.memory, key=self.key, tags=self.tags)


class ReviewResponse(BaseModel):
    model_config = ConfigDict(extra="ignore")

    decisions: list[Decision] = Field(default_factory=list)

    @field_validator("decisions", mode="before")
    @classmethod
    def _null_is_empty(cls, value: Any) -> Any:
        return [] if value is None else value

    def decision_for(self, item: int, candidates: int) -> Decision | None:
        """The first merge decision for ``item`` naming one of its ``candidates``."""
        return next((d for d in self.decisions if d.item == item
                     and d.relation != "independent" and d.candidate is not None
                     and d.candidate < candidates), None)


# --------------------------------------------------------------------------- prompt text

_SYSTEM = f"""\
You keep the long-term memory of a personal assistant. New memories were just extracted; \
each is listed with stored memories that resemble it (CANDIDATES, most similar first). For \
each new memory decide whether it is redundant with, or contradicts, one of its candidates.

Labels:
{LABEL_DEFINITIONS}
- "supersedes": the NEW memory says outright that what the candidate states stopped being \
true at some point: the person moved away, left or changed a job, sold or replaced a thing, \
stopped or gave up a habit, ended a relationship, no longer does or is something. Both stay \
true of their own time, so nothing is merged: the candidate is kept as what held before. \
Not a plan, a wish, a trip, a visit, a hypothesis, or another person's change; not a \
statement about a time before the candidate's.
  e.g. "The user lives in Lyon." / "The user moved from Lyon to Berlin in May 2024."
  e.g. "用户抽烟。" / "用户已经戒烟了。"

How to decide: first check who or what each statement is about (the user, a relative, a \
named person, a place, a product): different subjects are independent however alike the \
sentences are. Then compare names, places, numbers, dates and negations. Similarity only \
says the two are about related things. When unsure between redundant and independent, \
answer independent: merging two different facts destroys one of them.

For a redundant or contradictory pair, also write the single memory that replaces both: \
one self-contained statement in the third person, in the language of the statements. For a \
contradiction the newer statement is the current state; for redundancy keep every detail \
either gives. Add nothing neither says. key: a short title; tags: 2 to 5 topic words.

A contradiction that is a change over time, stated as one, is "supersedes" (no merged \
statement needed); "contradictory" is for two statements that cannot both be true and \
where neither says that the other stopped holding.

List only the new memories that are redundant, contradictory or supersede a candidate; leave \
independent ones out.
Answer with one JSON object and nothing else (no markdown fences, no extra text):
{{{{"decisions": [{{{{"item": 0, "candidate": 0, "relation": "contradictory" | "redundant" \
| "supersedes", "reason": "one short sentence", "memory": "the merged statement (not for \
supersedes)", "key": "short title", "tags": ["topic"]}}}}]}}}}"""


def render(ctx: ReviewContext) -> list[ChatMessage]:
    """The rules, then each new memory with its numbered candidates and similarities."""
    blocks = []
    for i, item in enumerate(ctx.items):
        lines = [describe_memory(f"NEW memory {i}", item.new), "  CANDIDATES:"]
        for j, cand in enumerate(item.candidates):
            lines.append(describe_memory(f"  candidate {j} (similarity {cand.similarity:.3f})",
                                         cand.statement).replace("\n", "\n  "))
        blocks.append("\n".join(lines))
    blocks.append(f"Pairs at or above similarity {ctx.merge_threshold:.2f} are merge "
                  "candidates. Which new memories repeat or contradict a candidate? Answer "
                  "with the JSON object only.")
    return [
        {"role": "system", "content": _SYSTEM.format()},
        {"role": "user", "content": "\n\n".join(blocks)},
    ]


REVIEW: Task[ReviewContext, ReviewResponse] = Task(
    name="memory.review",
    render=render,
    response=ReviewResponse,
)
