"""Cluster summaries (SPEC §3.3, periodic optimization): one parent node per cluster.

``SummaryContext`` (the cluster's members and the level wanted: ``concept`` over facts,
``topic`` over concept summaries) in, chat messages out, answers validated by
``SummaryResponse`` (``key``, ``value``, ``tags``, ``background``). The caller writes the
node with that ``hierarchy_level`` and ``PARENT`` edges to the members. The ``rules``
stand-in titles the cluster with its most common subject tags and lists the members' keys,
in the language most members are written in.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from streams.llm.port import ChatMessage, Task
from streams.prompts.members import (
    MAX_TAGS,
    MemberNote,
    clean_tag_list,
    group_is_chinese,
    joined,
    listed_keys,
    members_block,
    one_line,
    ranked_tags,
    subject_tags,
)
from streams.prompts.promptkit import JSON_ONLY, JSON_ONLY_TAIL, language_rule

Level = Literal["topic", "concept"]


class SummaryContext(BaseModel):
    """A cluster to summarise: its members (facts, or concept summaries for a topic)."""

    model_config = ConfigDict(frozen=True)

    members: list[MemberNote] = Field(min_length=1)
    level: Level = "concept"


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
    """Key from the 2–3 most common subject tags, value listing the members' keys."""
    zh = group_is_chinese(ctx.members)
    ranked = subject_tags(ctx.members)
    # A third tag only when more than one member carries it.
    title_tags = [t for i, (t, n) in enumerate(ranked[:3]) if i < 2 or n > 1]
    if not title_tags:
        title_tags = [t for t, _ in ranked_tags([m.tags for m in ctx.members])[:2]]
    title = joined(title_tags, zh) or ctx.members[0].title
    tags = [t for t, _ in ranked[:MAX_TAGS]] or title_tags
    keys = listed_keys(ctx.members, zh)
    count = len(ctx.members)
    if zh:
        value = f"关于{title}的记忆：{keys}"
        unit = "个概念" if ctx.level == "topic" else "条记忆"
        background = f"汇总了{count}{unit}：{keys}"
    else:
        value = f"Memories about {title}: {keys}"
        unit = ("concept" if ctx.level == "topic" else "memory") if count == 1 else (
            "concepts" if ctx.level == "topic" else "memories"
        )
        background = f"Combines {count} {unit}: {keys}"
    return SummaryResponse(key=title, value=value, tags=tags, background=background)


CLUSTER_SUMMARY: Task[SummaryContext, SummaryResponse] = Task(
    name="reorganize.cluster_summary",
    render=render,
    response=SummaryResponse,
    rules=rules,
)
