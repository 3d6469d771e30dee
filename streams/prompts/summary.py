"""Cluster summaries: one parent node per cluster.

``SummaryContext`` (the cluster's members and the level wanted: ``concept`` over facts,
``topic`` over concept summaries) in, chat messages out, answers validated by
``SummaryResponse`` (``key``, ``value``, ``tags``, ``background``). The caller writes the
node with that ``hierarchy_level`` and ``PARENT`` edges to the members. The ``rules``
stand-in writes nothing of its own: it quotes the 1–3 most central members verbatim (whole
sentences, each in its own language) under a title of whole-word subject tags.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from memstream.streams.prompts.members import (
    MemberNote,
    clean_tag_list,
    members_block,
    one_line,
)
from memstream.streams.prompts.promptkit import (
    JSON_ONLY,
    JSON_ONLY_TAIL,
    ChatMessage,
    Task,
    language_rule,
)

Level = Literal["topic", "concept"]


class SummaryContext(BaseModel):
    """A cluster to summarise: its members (facts, or concept summaries for a topic)."""

    model_config = ConfigDict(frozen=True)

    members: list[MemberNote] = Field(min_length=1)
    level: Level = "concept"
    # One score per member, higher is more central (cosine to the cluster's centroid), filled
    # by the optimizer for the ``rules`` stand-in; the prompt does not show it.
    centrality: list[float] | None = None

    @model_validator(mode="after")
    def _one_score_per_member(self) -> SummaryContext:
        if self.centrality is not None and len(self.centrality) != len(self.members):
            raise ValueError(f"centrality has {len(self.centrality)} scores for "
                             f"{len(self.members)} members")
        return self


class SummaryResponse(BaseModel):
    """The summary node: title, statement, tags and what it combines."""

    model_config = ConfigDict(extra="ignore")

    key: str = Field(min_length=1)
    value: str = Field(min_length=1)
    tags: list[str] = Field(default_factory=list)
    background: str = ""

    _text = field_validator("key", "value", "background", mode="before")(one_line)

    _tags = field_validator("tags", mode="before")(clean_tag_list)


# --------------------------------------------------------------------------- prompt text

LEVELS: dict[str, str] = {
    "concept": (
        "The members are individual memories (facts, events, preferences) that an embedding "
        "clustering put together. Write a CONCEPT summary: the specific theme they share, with "
        "the main specifics (names, places, dates, numbers) that make it useful on its own."
    ),
    "topic": (
        "The members are concept summaries, each already covering several memories. Write a "
        "TOPIC summary: the broader area of the user's life they belong to, naming each "
        "concept briefly. Keep it general; the concepts hold the details."
    ),
}

_SYSTEM = """\
You organise the long-term memory of a personal assistant into a tree: topic → concept → \
memory. {level_rule}

Rules:
- Use only what the members say. Add no facts, names, dates or opinions of your own.
- If some members do not fit the common theme, leave them out of the value rather than \
stretching the theme to cover them.
- key: a short title of a few words (no "Summary of" or "Memories about").
- value: one to three sentences in the third person ("The user …", "用户……").
- tags: 2 to 5 short subject tags, the most telling first.
- background: one sentence on what the summary combines (how many members, about what).
- {language}

{json_only}
{{"key": "...", "value": "...", "tags": ["..."], "background": "..."}}"""


def render(ctx: SummaryContext) -> list[ChatMessage]:
    """The level's instructions, then the numbered members with keys and tags."""
    language = language_rule(
        [m.text for m in ctx.members], "key, value, tags and background", source="group"
    )
    system = _SYSTEM.format(
        level_rule=LEVELS[ctx.level], language=language, json_only=JSON_ONLY
    )
    user = "\n\n".join([
        f"Level: {ctx.level}",
        f"Members ({len(ctx.members)}):\n{members_block(ctx.members)}",
        f"Write the {ctx.level} summary. " + JSON_ONLY_TAIL,
    ])
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": user},
    ]










CLUSTER_SUMMARY: Task[SummaryContext, SummaryResponse] = Task(
    name="reorganize.cluster_summary",
    render=render,
    response=SummaryResponse,
)
