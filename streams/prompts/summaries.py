"""Cluster summaries of one optimization run in one call (``summary``'s task, batched).

An optimization run found one summary question per cluster (18 calls in a 40-turn LoCoMo
window); ``SummariesContext`` lists the run's clusters of one level that have no summary
yet, numbered, and ``SummariesResponse`` answers each by its number. A cluster left out of
the answer gets no summary this run. Its ``rules`` stand-in is ``streams.llm.rules.summaries``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from memstream.streams.prompts.members import members_block
from memstream.streams.prompts.promptkit import (
    JSON_ONLY,
    JSON_ONLY_TAIL,
    ChatMessage,
    Task,
    language_rule,
)
from memstream.streams.prompts.summary import LEVELS, Level, SummaryContext, SummaryResponse


class SummariesContext(BaseModel):
    """The clusters (of one level) to summarise."""

    model_config = ConfigDict(frozen=True)

    level: Level = "concept"
    clusters: list[SummaryContext] = Field(min_length=1)

    @model_validator(mode="after")
    def _one_level(self) -> SummariesContext:
        if any(c.level != self.level for c in self.clusters):
            raise ValueError(f"every cluster must be a {self.level} cluster")
        return self


class NumberedSummary(SummaryResponse):
    cluster: int = Field(ge=0)


class SummariesResponse(BaseModel):
    model_config = ConfigDict(extra="ignore")

    summaries: list[NumberedSummary] = Field(default_factory=list)

    @field_validator("summaries", mode="before")
    @classmethod
    def _null_is_empty(cls, value: Any) -> Any:
        return [] if value is None else value

    def summary_for(self, index: int) -> SummaryResponse | None:
        return next((s for s in self.summaries if s.cluster == index), None)


_SYSTEM = """\
You organise the long-term memory of a personal assistant into a tree: topic → concept → \
memory. Several clusters follow, numbered. {level_rule}

Rules, for each cluster:
- Use only what its members say. Add no facts, names, dates or opinions of your own.
- If some members do not fit the common theme, leave them out of the value.
- key: a short title of a few words (no "Summary of" or "Memories about").
- value: one to three sentences in the third person ("The user …", "用户……").
- tags: 2 to 5 short subject tags, the most telling first.
- background: one sentence on what the summary combines.
- {language}

{json_only}
{{"summaries": [{{"cluster": 0, "key": "...", "value": "...", "tags": ["..."], \
"background": "..."}}]}}"""


def render(ctx: SummariesContext) -> list[ChatMessage]:
    """The level's instructions, then each cluster's numbered members."""
    texts = [m.text for c in ctx.clusters for m in c.members]
    language = language_rule(texts, "key, value, tags and background", source="cluster")
    system = _SYSTEM.format(level_rule=LEVELS[ctx.level], language=language,
                            json_only=JSON_ONLY)
    blocks = [f"Level: {ctx.level}"]
    blocks += [f"CLUSTER {n} ({len(c.members)} members):\n{members_block(c.members)}"
               for n, c in enumerate(ctx.clusters)]
    blocks.append(f"Write one {ctx.level} summary per cluster. " + JSON_ONLY_TAIL)
    return [{"role": "system", "content": system},
            {"role": "user", "content": "\n\n".join(blocks)}]


CLUSTER_SUMMARIES: Task[SummariesContext, SummariesResponse] = Task(
    name="reorganize.cluster_summaries",
    render=render,
    response=SummariesResponse,
)
