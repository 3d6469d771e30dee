"""Concept aggregation: is a group sharing tags worth a concept node?

``AggregateContext`` (the members and the tags they share) in, chat messages out, answers
validated by ``AggregateResponse``: ``create`` and, when true, the concept's ``key``,
``value``, ``tags`` and ``background``. The caller writes the concept node and
``AGGREGATE_TO`` edges from the members. The ``rules`` stand-in creates a concept only
when at least three members share at least two subject (non-generic) tags, and writes
nothing of its own: it quotes the most central of them verbatim under the shared tags.
"""

from __future__ import annotations

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
    nonblank,
)


class AggregateContext(BaseModel):
    """A group of memories that share tags, and the shared tags that brought them together."""

    model_config = ConfigDict(frozen=True)

    members: list[MemberNote] = Field(min_length=2)
    shared_tags: list[str] = Field(default_factory=list)
    # One score per member, higher is more central (cosine to the group's centroid), filled
    # by the optimizer for the ``rules`` stand-in; the prompt does not show it.
    centrality: list[float] | None = None

    _clean = field_validator("shared_tags", mode="before")(nonblank)

    @model_validator(mode="after")
    def _one_score_per_member(self) -> AggregateContext:
        if self.centrality is not None and len(self.centrality) != len(self.members):
            raise ValueError(f"centrality has {len(self.centrality)} scores for "
                             f"{len(self.members)} members")
        return self


class AggregateResponse(BaseModel):
    """Whether to create the concept and, if so, the node to write."""

    model_config = ConfigDict(extra="ignore")

    create: bool
    key: str = ""
    value: str = ""
    tags: list[str] = Field(default_factory=list)
    background: str = ""

    _text = field_validator("key", "value", "background", mode="before")(one_line)

    _tags = field_validator("tags", mode="before")(clean_tag_list)

    @model_validator(mode="after")
    def _concept_has_content(self) -> AggregateResponse:
        if self.create and not self.value:
            raise ValueError("create is true but the concept has no value")
        if self.create and not self.key:
            self.key = self.value[:60]
        return self


# --------------------------------------------------------------------------- prompt text

_SYSTEM = """\
You organise the long-term memory of a personal assistant. The memories below share some \
tags. Decide whether a higher-level concept node is worth creating for them: one statement \
that captures what they have in common and that would help the assistant on its own, such \
as "The user is a keen mountain hiker: trips to the Alps and the Dolomites, new hiking boots, \
training for a 3,000 m summit."

Answer "create": false when the overlap is trivial: the shared tags are generic (like \
"preference", "plan", "habit", "event", "user", "偏好", "计划") or the memories merely share \
a word, a date or a place while being about different things. Answer false also when the \
group has nothing to say beyond its members. When in doubt, answer false.

When "create" is true:
- key: a short title of a few words naming the concept.
- value: one or two sentences stating the common concept and the main specifics of the \
members. Use only what the memories say; add no facts, names or dates of your own.
- tags: 2 to 5 short subject tags.
- background: one sentence on what the concept combines (how many memories, about what).
- {language}

{json_only}
{{"create": true | false, "key": "...", "value": "...", "tags": ["..."], "background": "..."}}"""


def render(ctx: AggregateContext) -> list[ChatMessage]:
    """The rules, then the shared tags and the numbered members."""
    language = language_rule(
        [m.text for m in ctx.members], "key, value, tags and background", source="group"
    )
    shared = ", ".join(ctx.shared_tags) if ctx.shared_tags else "(none given)"
    user = "\n\n".join([
        f"Shared tags: {shared}",
        f"Memories ({len(ctx.members)}):\n{members_block(ctx.members)}",
        "Is a concept node worth creating? " + JSON_ONLY_TAIL,
    ])
    return [
        {"role": "system", "content": _SYSTEM.format(language=language, json_only=JSON_ONLY)},
        {"role": "user", "content": user},
    ]








AGGREGATE: Task[AggregateContext, AggregateResponse] = Task(
    name="reorganize.aggregate",
    render=render,
    response=AggregateResponse,
)
