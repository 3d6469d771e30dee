"""Cluster summaries (SPEC §3.3, periodic optimization): one parent node per cluster.

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

from streams.llm.port import ChatMessage, Task
from streams.prompts.members import (
    MemberNote,
    central_statements,
    clean_tag_list,
    group_is_chinese,
    is_generic,
    joined_statements,
    keyword_title,
    members_block,
    one_line,
    subject_tags,
    title_tags,
)
from streams.prompts.promptkit import JSON_ONLY, JSON_ONLY_TAIL, language_rule
from streams.prompts.textutil import tags_for

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

_LEVELS: dict[str, str] = {
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
        level_rule=_LEVELS[ctx.level], language=language, json_only=JSON_ONLY
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


# --------------------------------------------------------------------------- rules stand-in


def rules(ctx: SummaryContext) -> SummaryResponse:
    """Extractive: the most central members verbatim, titled with whole-word subject tags."""
    quoted = central_statements(ctx.members, ctx.centrality,
                                first_sentence_only=ctx.level == "topic")
    texts = [m.text for m in ctx.members]
    ranked = subject_tags(ctx.members)
    tags = title_tags(ranked, texts)
    title = keyword_title(texts, ranked) or _fallback_title(quoted[0], texts)
    return SummaryResponse(
        key=title, value=joined_statements(quoted), tags=tags,
        background=_background(ctx, len(quoted)))


def _fallback_title(lead: str, texts: list[str]) -> str:
    """Every tag is generic: the lead statement's salient words, or the statement itself."""
    words = [t for t in tags_for(lead, limit=6) if not is_generic(t)]
    return keyword_title(texts, [(w, 2) for w in words]) or lead


def _background(ctx: SummaryContext, quoted: int) -> str:
    count = len(ctx.members)
    if group_is_chinese(ctx.members):
        unit = "个概念" if ctx.level == "topic" else "条记忆"
        return f"汇总了{count}{unit}（抽取式，无模型）：逐字引用最有代表性的{quoted}条。"
    if ctx.level == "topic":
        noun = "concept" if count == 1 else "concepts"
    else:
        noun = "memory" if count == 1 else "memories"
    which = "the most central one" if quoted == 1 else f"the {quoted} most central"
    return f"Summary of {count} {noun} (extractive, no model): {which} quoted verbatim."


CLUSTER_SUMMARY: Task[SummaryContext, SummaryResponse] = Task(
    name="reorganize.cluster_summary",
    render=render,
    response=SummaryResponse,
    rules=rules,
)
