"""Inferred facts: what follows from a CAUSE or CONDITION pair, as a typed task.

``InferenceContext`` (the source and target of a detected CAUSE/CONDITION link) in, chat
messages out, answers validated by ``InferenceResponse``: one statement beginning "It can be
inferred that …" ("可以推断…"), or none. The caller stores it as a ``reasoning`` node with
``INFERRED_FROM`` edges. The ``rules`` stand-in infers nothing: without a model there is no
reasoning to record.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, field_validator

from memstream.streams.prompts.members import is_generic
from memstream.streams.prompts.promptkit import (
    JSON_ONLY,
    JSON_ONLY_TAIL,
    ChatMessage,
    Task,
    clip,
    language_rule,
)
from memstream.streams.prompts.relations import (
    RelationContext,
    RelationNode,
    RelationResponse,
    describe_node,
    resolved_direction,
)
from memstream.streams.text.relevance import TextIndex, query_terms
from memstream.streams.text.words import is_mostly_chinese

EN_PREFIX = "It can be inferred that"
ZH_PREFIX = "可以推断"
_ZH_PREFIXES = ("由此可以推断", "可以推断出", "可以推断", "可推断出", "可推断", "由此推断", "推断")
_NOTHING = frozenset({"", "none", "null", "nil", "n/a", "no", "nothing", "无", "没有", "无法推断"})
_LOWER_LEADS = frozenset({"the", "a", "an", "this", "that", "these", "those", "it", "there"})
FACT_MAX_CHARS = 400


class InferenceContext(BaseModel):
    """A linked pair: ``source`` caused (or is the condition of) ``target``."""

    model_config = ConfigDict(frozen=True)

    relation: Literal["CAUSE", "CONDITION"]
    source: RelationNode
    target: RelationNode
    reason: str = ""

    @classmethod
    def from_relation(
        cls, ctx: RelationContext, answer: RelationResponse
    ) -> InferenceContext | None:
        """The pair oriented by the detector's answer; None unless it is CAUSE or CONDITION."""
        direction = resolved_direction(ctx, answer)
        if direction is None or answer.relation not in ("CAUSE", "CONDITION"):
            return None
        source, target = (ctx.new, ctx.old) if direction == "new_to_old" else (ctx.old, ctx.new)
        relation: Literal["CAUSE", "CONDITION"] = (
            "CAUSE" if answer.relation == "CAUSE" else "CONDITION"
        )
        return cls(relation=relation, source=source, target=target, reason=answer.reason)


class InferenceResponse(BaseModel):
    """``fact``: one statement starting with the inference phrase, or None.

    A statement without the phrase gets it prepended (the phrase marks reasoning nodes);
    blanks and "none"/"null"/"无" mean no fact.
    """

    model_config = ConfigDict(extra="ignore")

    fact: str | None = None

    @field_validator("fact", mode="before")
    @classmethod
    def _phrased(cls, value: Any) -> Any:
        if value is None or not isinstance(value, str):
            return value
        text = " ".join(value.split())
        if text.strip(" .。!！").lower() in _NOTHING:
            return None
        text = clip(text, FACT_MAX_CHARS)
        if text.lower().startswith(EN_PREFIX.lower()):
            body = text[len(EN_PREFIX):].strip(" ,:")
            return f"{EN_PREFIX} {body}" if body.strip(" .") else None
        for prefix in _ZH_PREFIXES:
            if text.startswith(prefix):
                body = text[len(prefix):].lstrip("，,：: ")
                return f"{ZH_PREFIX}{body}" if body.strip("。.") else None
        if is_mostly_chinese(text):
            return f"{ZH_PREFIX}{text}"
        first, _, rest = text.partition(" ")
        if first.lower() in _LOWER_LEADS:
            first = first.lower()
        return f"{EN_PREFIX} {first} {rest}".rstrip()


def fact_body(fact: str) -> str:
    """The statement without its inference phrase."""
    if fact.startswith(EN_PREFIX):
        return fact[len(EN_PREFIX):].strip()
    if fact.startswith(ZH_PREFIX):
        return fact[len(ZH_PREFIX):].lstrip("，,：: ")
    return fact


def novel_fact(ctx: InferenceContext, answer: InferenceResponse) -> str | None:
    """The answer's fact unless it only restates one of the two memories.

    A fact all of whose salient terms already occur in one memory adds nothing to it.
    """
    if answer.fact is None:
        return None
    terms = [t for t in query_terms(fact_body(answer.fact)) if not is_generic(t)]
    if not terms:
        return None
    for node in (ctx.source, ctx.target):
        index = TextIndex(node.text)
        if all(index.contains(t) for t in terms):
            return None
    return answer.fact


# --------------------------------------------------------------------------- prompt text

_LINKS = {
    "CAUSE": "SOURCE caused TARGET (one led to the other).",
    "CONDITION": "TARGET holds only if, or only when, SOURCE holds.",
}

_SYSTEM = """\
You reason over the long-term memory of a personal assistant. Two memories are linked: \
{link}

Write at most ONE new fact that follows from the two memories taken together and that is \
not already stated in either of them. It must begin with "It can be inferred that" (in \
Chinese: "可以推断"), be a single self-contained statement in the third person ("the user …", \
"用户……"), and keep names, places, dates and numbers exactly as given. Do not restate either \
memory, do not merely restate the link itself, do not guess beyond what the pair supports, \
and do not give advice. If nothing new follows with good confidence, answer null; that is \
often the right answer.

Examples:
- SOURCE "The user's flight to Berlin on 2025-05-02 was delayed by three hours." caused \
TARGET "The user missed the 2 pm meeting with the client in Berlin on 2025-05-02." -> \
{{"fact": "It can be inferred that the user arrived in Berlin after 2 pm on 2025-05-02."}}
- SOURCE "用户上周扭伤了脚踝。" caused TARGET "用户这周没有去跑步。" -> \
{{"fact": "可以推断用户的脚踝到这周还没有完全恢复。"}}
- SOURCE "The user likes Italian food." and TARGET "The user booked a table at an Italian \
restaurant." -> {{"fact": null}}

{language}

{json_only}
{{"fact": "It can be inferred that …" | null}}"""


def render(ctx: InferenceContext) -> list[ChatMessage]:
    """The kind of link, then both memories; the answer is one inferred fact or null."""
    language = language_rule(
        [ctx.source.text, ctx.target.text], "the fact", source="pair of memories"
    )
    system = _SYSTEM.format(link=_LINKS[ctx.relation], language=language, json_only=JSON_ONLY)
    parts = [
        f"Link: {ctx.relation}. {_LINKS[ctx.relation]}",
        describe_node("SOURCE memory", ctx.source),
        describe_node("TARGET memory", ctx.target),
    ]
    if ctx.reason:
        parts.append(f"Why they were linked: {clip(ctx.reason, 300)}")
    parts.append("What new fact, if any, can be inferred? " + JSON_ONLY_TAIL)
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": "\n\n".join(parts)},
    ]




INFERENCE: Task[InferenceContext, InferenceResponse] = Task(
    name="reorganize.inference",
    render=render,
    response=InferenceResponse,
)
