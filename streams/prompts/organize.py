"""The optimizer's one question per reorganize event: links, the facts
they imply, and concept nodes, for all of a chunk's new memories at once.

Asking per pair cost a call for every neighbour of every new node (35 calls per turn on
LoCoMo). Here ``OrganizeContext`` lists the memories once, numbered, says which pairs to
label (each new memory with its capped, most similar earlier neighbours) and which tag
groups might deserve a concept; ``OrganizeResponse`` answers all of it. A pair left out of
the answer is NONE; a group left out is not created. The labels, directions and concept
rules are those of the per-pair tasks (``relations``, ``inference``, ``aggregate``), whose
models this reuses. Its ``rules`` stand-in is ``streams.llm.rules.organize``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from memstream.streams.prompts.aggregate import AggregateContext, AggregateResponse
from memstream.streams.prompts.inference import InferenceResponse
from memstream.streams.prompts.members import members_block
from memstream.streams.prompts.promptkit import (
    JSON_ONLY,
    JSON_ONLY_TAIL,
    ChatMessage,
    Task,
    language_rule,
)
from memstream.streams.prompts.relations import (
    RelationContext,
    RelationNode,
    RelationResponse,
    describe_node,
)


class OrganizeContext(BaseModel):
    """Memories numbered from 0; ``pairs`` (new, earlier) to label; ``groups`` to judge."""

    model_config = ConfigDict(frozen=True)

    memories: list[RelationNode]
    pairs: list[tuple[int, int]] = Field(default_factory=list)
    groups: list[AggregateContext] = Field(default_factory=list)

    @model_validator(mode="after")
    def _pairs_in_range(self) -> OrganizeContext:
        n = len(self.memories)
        for a, b in self.pairs:
            if not (0 <= a < n and 0 <= b < n) or a == b:
                raise ValueError(f"pair ({a}, {b}) does not name two of the {n} memories")
        return self

    def pair(self, index: int) -> RelationContext:
        """The pair as the per-pair relation task would see it."""
        a, b = self.pairs[index]
        return RelationContext(new=self.memories[a], old=self.memories[b])

    @property
    def empty(self) -> bool:
        return not self.pairs and not self.groups


class PairAnswer(RelationResponse):
    """One labelled pair (by its number in ``pairs``), with the fact it implies if any."""

    pair: int = Field(ge=0)
    inferred: str | None = None

    @field_validator("inferred", mode="before")
    @classmethod
    def _phrased(cls, value: Any) -> Any:
        return InferenceResponse.model_validate({"fact": value}).fact


class GroupAnswer(AggregateResponse):
    """The concept decision for one group (by its number in ``groups``)."""

    group: int = Field(ge=0)


class OrganizeResponse(BaseModel):
    """Labels for the pairs worth linking and decisions on the groups; the rest is NONE."""

    model_config = ConfigDict(extra="ignore")

    links: list[PairAnswer] = Field(default_factory=list)
    concepts: list[GroupAnswer] = Field(default_factory=list)

    @field_validator("links", "concepts", mode="before")
    @classmethod
    def _null_is_empty(cls, value: Any) -> Any:
        return [] if value is None else value

    def link_for(self, index: int) -> PairAnswer | None:
        """The first answer for pair ``index`` that is not NONE."""
        return next((a for a in self.links if a.pair == index and a.relation != "NONE"), None)

    def concept_for(self, index: int) -> GroupAnswer | None:
        return next((c for c in self.concepts if c.group == index), None)


# --------------------------------------------------------------------------- prompt text

_SYSTEM = """\
You maintain the knowledge graph of a personal assistant's long-term memory. New memories \
were just stored. Below are the memories involved, numbered, then the PAIRS to judge (a new \
memory and one of its earlier neighbours) and the tag GROUPS that might deserve a concept.

For each pair, decide whether a typed link is worth adding. Add a link only when it adds \
knowledge that is not explicit in either memory: sharing a word, a place or a topic is not \
enough. Most pairs get no link: leave them out of the answer.
- "CAUSE": one event or state brought about the other.
- "CONDITION": one holds only if, or only when, the other does.
- "CONFLICT": the two cannot both be true now.
- "RELATE": both are about the same specific thing (trip, person, project, event, object).
direction (CAUSE and CONDITION only): "new_to_old" when the first memory of the pair is the \
cause or condition of the second, "old_to_new" otherwise; a cause comes before its effect.
inferred (CAUSE and CONDITION only, else null): one fact that follows from the pair and \
that neither memory states, starting with "It can be inferred that" (Chinese: "可以推断"), \
or null when nothing new follows.

For each group, "create": true only when one statement capturing what the members have in \
common would help the assistant on its own; false when the shared tags are generic or the \
members merely share a word. When true give key (a short title), value (one or two \
sentences, only what the members say), tags (2 to 5) and background (one sentence).

Judge the meaning, not the wording; memories may be in Chinese, English or both. {language}

{json_only}
{{"links": [{{"pair": 0, "relation": "CAUSE" | "CONDITION" | "RELATE" | "CONFLICT", \
"direction": "new_to_old" | "old_to_new" | null, "reason": "one short sentence", \
"inferred": "It can be inferred that ..." | null}}], \
"concepts": [{{"group": 0, "create": true | false, "key": "...", "value": "...", \
"tags": ["..."], "background": "..."}}]}}"""


def render(ctx: OrganizeContext) -> list[ChatMessage]:
    """Rules, then the numbered memories, the pairs and the groups."""
    texts = [m.text for m in ctx.memories] or [m.text for g in ctx.groups for m in g.members]
    language = language_rule(texts, "reasons, inferred facts and concepts",
                             source="new memories")
    parts = ["Memories:\n" + "\n".join(describe_node(f"[{i}]", m)
                                         for i, m in enumerate(ctx.memories))]
    if ctx.pairs:
        lines = []
        for n, (a, b) in enumerate(ctx.pairs):
            new, old = ctx.memories[a], ctx.memories[b]
            same = new.session_id is not None and new.session_id == old.session_id
            lines.append(f"pair {n}: [{a}] (new) with [{b}] (earlier)"
                         f"{', same session' if same else ''}")
        parts.append("PAIRS:\n" + "\n".join(lines))
    for n, group in enumerate(ctx.groups):
        shared = ", ".join(group.shared_tags) or "(none given)"
        parts.append(f"GROUP {n} (shared tags: {shared}):\n{members_block(group.members)}")
    parts.append("Which pairs should be linked, and which groups deserve a concept? "
                 + JSON_ONLY_TAIL)
    return [
        {"role": "system", "content": _SYSTEM.format(language=language, json_only=JSON_ONLY)},
        {"role": "user", "content": "\n\n".join(parts)},
    ]


ORGANIZE: Task[OrganizeContext, OrganizeResponse] = Task(
    name="reorganize.organize",
    render=render,
    response=OrganizeResponse,
)
