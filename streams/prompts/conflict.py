"""Conflict detection as a typed task: how a new memory relates to an old one.

``JudgeContext`` in (both statements, their timestamps, the embedding similarity and
the merge threshold), chat messages out (``render``), answers validated by
``JudgeResponse``; its ``rules`` stand-in is ``streams.llm.rules.conflict``.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from memstream.streams.prompts.promptkit import ChatMessage, Task
from memstream.streams.prompts.promptkit import MemoryStatement as MemoryStatement

Relation = Literal["contradictory", "redundant", "independent"]
# The chunk review's labels (``streams.prompts.review``): the judge's, and ``supersedes``: the
# new statement says outright that the earlier one stopped holding (a move, an ending, a
# switch). Its answer closes the earlier one's validity; nothing is merged.
ReviewRelation = Literal["contradictory", "redundant", "independent", "supersedes"]
REASON_MAX_CHARS = 300


class JudgeContext(BaseModel):
    """An existing activated memory, a new candidate, and how close their embeddings are."""

    model_config = ConfigDict(frozen=True)

    existing: MemoryStatement
    new: MemoryStatement
    similarity: float = Field(ge=-1.0, le=1.0)
    merge_threshold: float = Field(default=0.92, ge=0.0, le=1.0)


_RELATION_ALIASES: dict[str, Relation] = {
    "contradictory": "contradictory", "contradiction": "contradictory",
    "contradicts": "contradictory", "conflict": "contradictory", "conflicting": "contradictory",
    "redundant": "redundant", "redundancy": "redundant", "duplicate": "redundant",
    "duplicated": "redundant", "same": "redundant", "independent": "independent",
    "unrelated": "independent", "different": "independent", "none": "independent",
}
_REVIEW_ALIASES: dict[str, ReviewRelation] = {
    **_RELATION_ALIASES, "supersedes": "supersedes", "supersede": "supersedes",
    "superseded": "supersedes", "replaces": "supersedes", "replaced": "supersedes",
    "ends": "supersedes", "ended": "supersedes", "changed": "supersedes",
    "change": "supersedes", "update": "supersedes", "updates": "supersedes",
}


def review_relation(value: Any) -> Any:
    """A review label from the spellings models commonly use (anything else as it is)."""
    if isinstance(value, str):
        word = re.sub(r"[^a-z]", "", value.strip().lower())
        return _REVIEW_ALIASES.get(word, value)
    return value


class JudgeResponse(BaseModel):
    """The label and a short reason; lenient on the spellings models commonly use."""

    model_config = ConfigDict(extra="ignore")

    relation: Relation
    reason: str = ""

    @field_validator("relation", mode="before")
    @classmethod
    def _relation_alias(cls, value: Any) -> Any:
        if isinstance(value, str):
            word = re.sub(r"[^a-z]", "", value.strip().lower())
            return _RELATION_ALIASES.get(word, value)
        return value

    @field_validator("reason", mode="before")
    @classmethod
    def _short_reason(cls, value: Any) -> Any:
        if value is None:
            return ""
        if isinstance(value, str):
            text = " ".join(value.split())
            return text if len(text) <= REASON_MAX_CHARS else text[: REASON_MAX_CHARS - 1] + "…"
        return value


# --------------------------------------------------------------------------- prompt text

LABEL_DEFINITIONS = """\
- "redundant": the two carry the same information. The wording may differ, one may be a \
translation of the other, or one may contain the other (the longer one adds detail without \
changing anything the shorter one says). Merging them loses nothing.
  e.g. "The user lives in Berlin." / "The user's home is in Berlin."
  e.g. "用户对花生过敏。" / "用户花生过敏，不能吃含花生的食物。"
- "contradictory": both are about the same subject and the same attribute, and they cannot \
both be true at the same time. A change over time counts: the person moved, changed jobs, \
switched a phone or a car, changed a preference, an appointment was rescheduled, a number \
went up or down, something started or stopped, or one statement negates the other.
  e.g. "The user lives in Berlin." / "The user moved to Lisbon."
  e.g. "用户有两只猫。" / "用户现在有三只猫。"
- "independent": anything else — different subjects (the user versus the user's sister; \
"Anna" versus "Boris"; "my brother" versus "my sister"; 小王 versus 小李; one product versus \
another), different attributes (where the user lives versus where the user works), or facts \
that can all be true at once (liking coffee and liking jazz; two separate trips in different \
years)."""

_JUDGE_SYSTEM = f"""\
You keep the long-term memory of a personal assistant. A newly extracted memory resembles one \
that is already stored. Decide how the NEW memory relates to the EXISTING one, using exactly \
one of three labels.

Labels:
{LABEL_DEFINITIONS}

How to decide:
- First check who or what each statement is about: the speaker ("I", "my", "the user", 我, \
用户, or the name before a leading "Name:"), a relative or friend ("my sister", 我妹妹), a named \
person (Anna Kowalski, 王芳), a place or a product. If the two statements are about different \
subjects they are independent, however alike the rest of the sentence is: "Anna lives in \
Paris." and "Boris lives in Rome." are two true facts about two people, not a move. A \
relative, friend or colleague of the user is a different subject from the user, and two \
people with the same first name but different surnames are different people.
- Then compare the details one by one: names, places, organisations, numbers, amounts, dates, \
times, weekdays, and negation (not, never, no longer, stopped; 不, 没有, 不再, 已经不).
- The similarity score only tells you the two are about related things. Near-identical \
wording can still be independent (a meeting with the marketing team versus one with the \
finance team) or contradictory (two cats versus three cats).
- Redundant means nothing is lost by keeping only one of them. If either statement has a fact \
the other lacks and both can be true, it is not contradictory; it is redundant only if one \
contains the other. When unsure between redundant and independent, answer independent: \
merging two different facts destroys one of them.
- The timestamps tell you which statement is newer; a newer statement that reports a change \
contradicts the older one.
- Language: the statements may be in Chinese, in English or a mix of both. Judge the meaning, \
never the language or the wording: a statement and its translation are redundant. Write the \
reason in the language of the new memory.

Answer with one JSON object and nothing else (no markdown fences, no extra text):
{{"relation": "contradictory" | "redundant" | "independent", "reason": "one short sentence"}}"""


def describe_memory(label: str, memory: MemoryStatement) -> str:
    """A memory as the model sees it: label, timestamp, key, tags, text."""
    since = (f", holds since {memory.valid_from.isoformat(timespec='minutes')}"
             if memory.valid_from is not None else "")
    lines = [f"{label} (last updated {memory.updated_at.isoformat(timespec='minutes')}"
             f"{since}):"]
    if memory.key:
        lines.append(f"  key: {memory.key}")
    if memory.tags:
        lines.append(f"  tags: {', '.join(memory.tags)}")
    if memory.entities:
        lines.append(f"  entities: {', '.join(memory.entities)}")
    lines.append(f"  text: {memory.text.strip()}")
    return "\n".join(lines)


def newer_label(existing: MemoryStatement, new: MemoryStatement) -> str:
    """Which side is more recent; a tie goes to the new memory (it arrived later)."""
    return "EXISTING" if existing.updated_at > new.updated_at else "NEW"


def render(ctx: JudgeContext) -> list[ChatMessage]:
    """System rules with the label definitions, then the pair with timestamps and similarity."""
    user = "\n\n".join([
        describe_memory("EXISTING memory", ctx.existing),
        describe_memory("NEW memory", ctx.new),
        f"The {newer_label(ctx.existing, ctx.new)} memory is the more recent one.\n"
        f"Embedding similarity: {ctx.similarity:.3f} (pairs at or above "
        f"{ctx.merge_threshold:.2f} are merge candidates).",
        "How does the NEW memory relate to the EXISTING one? Answer with the JSON object only.",
    ])
    return [
        {"role": "system", "content": _JUDGE_SYSTEM},
        {"role": "user", "content": user},
    ]


RELATION_JUDGE: Task[JudgeContext, JudgeResponse] = Task(
    name="relation_judge",
    render=render,
    response=JudgeResponse,
)
