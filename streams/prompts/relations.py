"""Relation detection as a typed task: a new memory and one neighbour.

``RelationContext`` (the new node and one stored neighbour, with tags, entities, times and
sessions) in, chat messages out, answers validated by ``RelationResponse``: CAUSE,
CONDITION, RELATE, CONFLICT or NONE, and for CAUSE/CONDITION which way the edge points.
its ``rules`` stand-in is ``streams.llm.rules.relations``.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from memstream.streams.prompts.promptkit import (
    JSON_ONLY,
    JSON_ONLY_TAIL,
    ChatMessage,
    MemoryStatement,
    Task,
    clip,
    language_rule,
)

Relation = Literal["CAUSE", "CONDITION", "RELATE", "CONFLICT", "NONE"]
Direction = Literal["new_to_old", "old_to_new"]
DIRECTED: frozenset[str] = frozenset({"CAUSE", "CONDITION"})
REASON_MAX_CHARS = 300


RelationNode = MemoryStatement  # the relation tasks' name for one memory of the pair


class RelationContext(BaseModel):
    """The memory just added and one stored neighbour (found by tags or vector similarity)."""

    model_config = ConfigDict(frozen=True)

    new: RelationNode
    old: RelationNode


_RELATION_ALIASES: dict[str, Relation] = {
    "cause": "CAUSE", "causes": "CAUSE", "causal": "CAUSE", "caused": "CAUSE",
    "causeby": "CAUSE", "condition": "CONDITION", "conditional": "CONDITION",
    "conditions": "CONDITION", "relate": "RELATE", "related": "RELATE", "relates": "RELATE",
    "relateto": "RELATE", "relatedto": "RELATE", "relation": "RELATE", "conflict": "CONFLICT",
    "conflicts": "CONFLICT", "conflicting": "CONFLICT", "contradiction": "CONFLICT",
    "contradictory": "CONFLICT", "none": "NONE", "no": "NONE", "null": "NONE",
    "unrelated": "NONE", "independent": "NONE", "nolink": "NONE", "norelation": "NONE",
}


class RelationResponse(BaseModel):
    """The label, and for CAUSE/CONDITION which memory is the source of the edge.

    "new_to_old": the new memory is the cause (or the condition) of the old one. The
    direction of any other label is dropped.
    """

    model_config = ConfigDict(extra="ignore")

    relation: Relation
    direction: Direction | None = None
    reason: str = ""

    @field_validator("relation", mode="before")
    @classmethod
    def _relation_alias(cls, value: Any) -> Any:
        if isinstance(value, str):
            return _RELATION_ALIASES.get(re.sub(r"[^a-z]", "", value.lower()), value)
        return value

    @field_validator("direction", mode="before")
    @classmethod
    def _direction_words(cls, value: Any) -> Any:
        """Accepts "new_to_old", "NEW -> OLD", "new→old", "new causes old", blank for none."""
        if value is None:
            return None
        if isinstance(value, str):
            low = value.strip().lower()
            if not low or low in {"none", "null", "n/a"}:
                return None
            at_new, at_old = low.find("new"), low.find("old")
            if at_new >= 0 and at_old >= 0:
                return "new_to_old" if at_new < at_old else "old_to_new"
        return value

    @field_validator("reason", mode="before")
    @classmethod
    def _short_reason(cls, value: Any) -> Any:
        if value is None:
            return ""
        if isinstance(value, str):
            return clip(value, REASON_MAX_CHARS)
        return value

    @model_validator(mode="after")
    def _direction_only_when_directed(self) -> RelationResponse:
        if self.relation not in DIRECTED and self.direction is not None:
            self.direction = None
        return self


def resolved_direction(ctx: RelationContext, answer: RelationResponse) -> Direction | None:
    """The answer's direction for CAUSE/CONDITION; if the model gave none, time order
    (the earlier memory is the source; a tie goes old → new). None for other labels."""
    if answer.relation not in DIRECTED:
        return None
    if answer.direction is not None:
        return answer.direction
    return "new_to_old" if ctx.new.when < ctx.old.when else "old_to_new"


# --------------------------------------------------------------------------- prompt text

_SYSTEM = """\
You maintain the knowledge graph of a personal assistant's long-term memory. A NEW memory was \
just stored; an OLD memory is one of its neighbours. Decide whether a typed link between the \
two is worth adding, using exactly one label.

Add a link only when it adds knowledge that is not explicit in either memory on its own: \
knowing that the two are connected must tell the assistant something neither sentence says. \
If the link would only repeat what one of the memories already says, or if the two merely \
share a word, a place or a topic, answer NONE. NONE is the right answer for most pairs.

Labels:
- "CAUSE": one led to the other — one event or state brought about the other.
  e.g. "The user's flight to Berlin was delayed by three hours." / "The user missed the 2 pm \
client meeting in Berlin." (the delay caused the missed meeting)
  e.g. "用户上周扭伤了脚踝。" / "用户这周没有去跑步。"
- "CONDITION": one holds only if, or only when, the other does.
  e.g. "The user will go hiking on Saturday if the weather is good." / "Saturday's forecast \
is sunny and dry."
  e.g. "只要老板批准，用户下周就请假去旅行。" / "老板批准了用户下周的假期。"
- "CONFLICT": the two cannot both be true now (a change of state, a contradiction, two \
incompatible plans for the same time).
- "RELATE": both are clearly about the same specific thing (the same trip, person, project, \
event or object), but none of the labels above fits.
- "NONE": no link worth storing.

direction (only for CAUSE and CONDITION, otherwise null): "new_to_old" when the NEW memory is \
the cause (or the condition) of the OLD one; "old_to_new" when the OLD memory is the cause (or \
the condition) of the NEW one. Use the content and the event times: a cause comes before its \
effect.

Judge the meaning, never the wording: the memories may be in Chinese, in English or one of \
each. {language}

{json_only}
{{"relation": "CAUSE" | "CONDITION" | "RELATE" | "CONFLICT" | "NONE", \
"direction": "new_to_old" | "old_to_new" | null, "reason": "one short sentence"}}"""


def describe_node(label: str, node: RelationNode) -> str:
    """A memory as the model sees it: label, times, session, key, tags, entities, text."""
    when = ""
    if node.memory_time is not None:
        when = f"happened {node.memory_time.isoformat(timespec='minutes')}; "
    lines = [f"{label} ({when}last updated {node.updated_at.isoformat(timespec='minutes')}):"]
    if node.key:
        lines.append(f"  key: {clip(node.key, 120)}")
    if node.tags:
        lines.append(f"  tags: {', '.join(node.tags)}")
    if node.entities:
        lines.append(f"  entities: {', '.join(node.entities)}")
    lines.append(f"  text: {clip(node.text)}")
    return "\n".join(lines)


def render(ctx: RelationContext) -> list[ChatMessage]:
    """System rules with label definitions and examples, then the pair with times and sessions."""
    language = language_rule([ctx.new.text], "the reason", source="NEW memory")
    same_session = (
        ctx.new.session_id is not None and ctx.new.session_id == ctx.old.session_id
    )
    session = (
        "Both come from the same conversation session."
        if same_session
        else "They come from different conversation sessions (or the session is unknown)."
    )
    user = "\n\n".join([
        describe_node("NEW memory", ctx.new),
        describe_node("OLD memory", ctx.old),
        session,
        "Which link, if any, should connect them? " + JSON_ONLY_TAIL,
    ])
    system = _SYSTEM.format(language=language, json_only=JSON_ONLY)
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": user},
    ]


RELATION_DETECTOR: Task[RelationContext, RelationResponse] = Task(
    name="reorganize.relation_detector",
    render=render,
    response=RelationResponse,
)
