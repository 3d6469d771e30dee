"""Memory fusion as a typed task: two memories become one.

``FusionContext`` (both memories with timestamps, and the judged relation) in, chat
messages out, answers validated by ``FusionResponse``. The ``rules`` stand-in never
writes new text: it keeps the newer statement of a contradiction, the more
informative one of a redundant pair, and both sentences of an independent pair.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from memstream.streams.prompts.conflict import (
    MemoryStatement,
    Relation,
    describe_memory,
    newer_label,
)
from memstream.streams.prompts.promptkit import ChatMessage, Task
from memstream.streams.text.words import short_title

MAX_TAGS = 10


class FusionContext(BaseModel):
    """The stored memory, the new one, and how the judge related them."""

    model_config = ConfigDict(frozen=True)

    existing: MemoryStatement
    new: MemoryStatement
    relation: Relation


class FusionResponse(BaseModel):
    """The statement that replaces both, with its title and tags."""

    model_config = ConfigDict(extra="ignore")

    memory: str = Field(min_length=1)
    key: str = ""
    tags: list[str] = Field(default_factory=list)

    @field_validator("memory", mode="before")
    @classmethod
    def _strip(cls, value: Any) -> Any:
        return value.strip() if isinstance(value, str) else value

    @field_validator("key", mode="before")
    @classmethod
    def _key_or_empty(cls, value: Any) -> Any:
        return "" if value is None else value

    @field_validator("tags", mode="before")
    @classmethod
    def _tags_from_string(cls, value: Any) -> Any:
        if value is None:
            return []
        if isinstance(value, str):
            return [t.strip() for t in re.split(r"[,，、;；]", value) if t.strip()]
        return value


# --------------------------------------------------------------------------- prompt text

_RELATION_RULES: dict[str, str] = {
    "contradictory": (
        "The two statements contradict each other. The NEWER one (later timestamp) describes "
        "the current state and wins. Write the current state; you may mention the former state "
        "as history (\"The user moved from Berlin to Lisbon\"), but never present the older "
        "value as still true."
    ),
    "redundant": (
        "The two statements carry the same information. Write it once, keeping every detail "
        "either of them gives (names, places, numbers, dates). Where they differ only in "
        "wording, prefer the newer wording."
    ),
    "independent": (
        "The two statements hold different facts that are all true. Keep every fact of both "
        "in one statement; drop nothing."
    ),
}

_FUSION_SYSTEM = """\
You keep the long-term memory of a personal assistant. Two stored memories are being merged \
into one. Write the single memory that replaces both.

{relation_rule}

Rules:
- One self-contained statement that makes sense months later, read alone. Keep the third \
person of the inputs ("The user …"; in Chinese "用户……"); replace pronouns by who they refer to.
- Language: write in the language of the statements — Chinese in, Chinese out; English in, \
English out. If they are in different languages, use the language of the newer statement. \
Never translate names.
- Keep dates absolute and numbers exact. Add nothing that neither statement says.
- key: a short title of a few words. tags: 2 to 5 short topic words. Same language as the memory.

Answer with one JSON object and nothing else (no markdown fences, no extra text):
{{"memory": "the merged statement", "key": "short title", "tags": ["topic", "words"]}}"""


def render(ctx: FusionContext) -> list[ChatMessage]:
    """The rule for this relation, then both memories with timestamps, the newer one named."""
    system = _FUSION_SYSTEM.format(relation_rule=_RELATION_RULES[ctx.relation])
    user = "\n\n".join([
        f"Relation: {ctx.relation}",
        describe_memory("EXISTING memory", ctx.existing),
        describe_memory("NEW memory", ctx.new),
        f"The {newer_label(ctx.existing, ctx.new)} memory is the more recent one.",
        "Write the merged memory. Answer with the JSON object only.",
    ])
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": user},
    ]


















def fallback_key(text: str) -> str:
    """A title when neither memory has one: the opening words of the text, whole words."""
    return short_title(text)


FUSION: Task[FusionContext, FusionResponse] = Task(
    name="fusion",
    render=render,
    response=FusionResponse,
)
