"""Deterministic relation labels between two memories, for the ``rules`` relation detector.

Without a model, a causal or conditional link is claimed only when one memory names the
other: a cue ("because of", "due to", "if", "因为", "如果", …) introduces a clause, and the
other memory says most of what that clause says ("… because of the flight delay" /
"The user's flight was delayed"). A shared cue word alone is not enough: a booking of the
same flight shares "flight" but is not what the delay clause names. Otherwise two memories
that share a named entity or two subject tags are related; everything else is NONE. CONFLICT
is never claimed here: the merge stage judges contradictions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from memstream.streams.llm.rules.conflict_analysis import analyse
from memstream.streams.prompts.members import is_generic, norm_tag
from memstream.streams.prompts.relations import (
    Direction,
    RelationContext,
    RelationNode,
    RelationResponse,
)
from memstream.streams.text.relevance import TextIndex, stem
from memstream.streams.text.words import en_content_words, is_mostly_chinese, words_of

RuleRelation = Literal["CAUSE", "CONDITION", "RELATE", "NONE"]
Cue = Literal["because", "so", "if"]

# A clause is "named" by the other memory when it covers this share of the clause's terms.
CLAUSE_COVERAGE = 2 / 3
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
# Characters that carry grammar, not content; pairs containing one are not compared.
_ZH_FUNCTION = frozenset("的了是在和与跟也都就很要会着过吗呢吧啊呀还又再才把被对给让这那其个些")
# English stems sharing a prefix this long are one word family ("cancell-ed", "cancell-ation").
_FAMILY_PREFIX = 5

_EN_END = r"(?=[.;!?,]|\bso\b|\bwhich\b|\bbut\b|\band then\b|\bthen\b|$)"
_ZH_END = (r"(?=[，,。；;！？!?]|所以|因此|于是|导致|结果|就|才|便|而|错过|没有|没能|没|不能|无法"
           r"|只好|只能|取消|推迟|改|$)")
# Cues after which the cause is named (the memory holding them is the effect).
_EN_BECAUSE = re.compile(
    r"\b(?:because(?: of)?|due to|owing to|caused by|as a result of|thanks to|on account of"
    r"|result(?:ed|s)? from)\b(?P<clause>.*?)" + _EN_END, re.IGNORECASE)
_ZH_BECAUSE = re.compile(r"(?:因为|由于|多亏|鉴于)(?P<clause>.*?)" + _ZH_END)
# "missed the meeting after the flight delay": "after" is causal only before a disruption.
_EN_AFTER = re.compile(r"\bafter\b(?P<clause>.*?)" + _EN_END, re.IGNORECASE)
_DISRUPTIONS = frozenset(stem(w) for w in words_of("""
    delay delayed cancellation cancelled canceled strike storm accident breakdown crash illness
    sick injury traffic jam outage snow snowstorm rain flood fire failure overbooking
"""))
# Cues after which the effect is named (the memory holding them is the cause).
_EN_SO = re.compile(
    r"(?:,\s*so\b|\bso(?=\s+(?:the|he|she|they|it|we|his|her|their)\b)|\btherefore\b|\bthus\b"
    r"|\bhence\b|\bconsequently\b|\bas a result\b(?!\s+of)|\b(?:led|leads|lead|leading) to\b"
    r"|\bcaused\b(?!\s+by)|\bcauses\b(?!\s+of)|\bresult(?:ed|s)? in\b)(?P<clause>.*?)" + _EN_END,
    re.IGNORECASE)
_ZH_SO = re.compile(r"(?:所以|因此|导致|于是|结果|造成|以致|致使|从而|使得)(?P<clause>.*?)"
                    r"(?=[，,。；;！？!?]|$)")
# Cues after which a condition is named (the memory holding them holds only under it).
_EN_IF = re.compile(
    r"\b(?:only if|only when|if|unless|as long as|provided that|providing that|in case"
    r"|depend(?:s|ing)? on)\b(?P<clause>.*?)" + _EN_END, re.IGNORECASE)
_ZH_IF = re.compile(
    r"(?:如果|只要|除非|只有|要是|假如|倘若|取决于|前提是)(?P<clause>.*?)" + _ZH_END
)


@dataclass(frozen=True)
class Side:
    """One memory as the rules see it; ``when`` orders events (event time, else update time)."""

    text: str
    tags: tuple[str, ...] = ()
    entities: tuple[str, ...] = ()
    when: datetime | None = None
    # Derived: the text without its own cause/condition clauses, and its salient features.
    main: str = field(init=False)
    subject_tags: frozenset[str] = field(init=False)
    names: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        main = self.text
        for pattern in (_EN_BECAUSE, _ZH_BECAUSE, _EN_IF, _ZH_IF):
            main = pattern.sub(" ", main)
        object.__setattr__(self, "main", main)
        object.__setattr__(
            self, "subject_tags", frozenset(norm_tag(t) for t in self.tags if not is_generic(t))
        )
        names = {norm_tag(e) for e in self.entities if e.strip()} | set(analyse(self.text).entities)
        object.__setattr__(self, "names", frozenset(n for n in names if not is_generic(n)))


@dataclass(frozen=True)
class RuleLink:
    """The label; for CAUSE/CONDITION whether the new memory is the cause / the condition."""

    relation: RuleRelation
    new_is_source: bool | None
    reason: str


def link(new: Side, old: Side) -> RuleLink:
    """CAUSE, CONDITION, RELATE or NONE for a new memory and a stored one."""
    zh = is_mostly_chinese(new.text)
    shared = (new.subject_tags & old.subject_tags) | (new.names & old.names)
    causes = _cause_clauses(new, old, shared)
    if causes:
        # Both memories name the other as the cause: the earlier event is the cause.
        directions = {c[0] for c in causes}
        new_is_cause = causes[0][0] if len(directions) == 1 else _earlier_is_new(new, old)
        _, named, cue = next(c for c in causes if c[0] == new_is_cause)
        # The memory holding the cue: the effect after "because", the cause before "so".
        cue_in_new = new_is_cause if cue == "so" else not new_is_cause
        return RuleLink("CAUSE", new_is_cause, _reason(cue, named, cue_in_new, zh))
    for dependent, condition in ((new, old), (old, new)):
        if _is_conditional(condition):
            continue  # a conditional statement does not state that a condition holds
        clause = _covered_clause(dependent, condition, shared, (_EN_IF, _ZH_IF))
        if clause is not None:
            return RuleLink(
                "CONDITION", condition is new, _reason("if", clause, dependent is new, zh)
            )
    entities = new.names & old.names
    tags = new.subject_tags & old.subject_tags
    if entities or len(tags) >= 2:
        both = sorted(entities) or sorted(tags)
        listed = "、".join(both) if zh else ", ".join(both)
        reason = f"两条记忆都涉及{listed}。" if zh else f"Both memories are about {listed}."
        return RuleLink("RELATE", None, reason)
    reason = "没有共同的实体或主题标签。" if zh else "No shared named entity or subject tags."
    return RuleLink("NONE", None, reason)


def _cause_clauses(
    new: Side, old: Side, shared: frozenset[str]
) -> list[tuple[bool, str, Cue]]:
    """(new memory is the cause, clause, cue kind) for each cue clause the other memory states."""
    found: list[tuple[bool, str, Cue]] = []
    for x, y in ((new, old), (old, new)):
        clause = _covered_clause(x, y, shared, (_EN_BECAUSE, _ZH_BECAUSE))
        if clause is None:
            clause = _after_clause(x, y, shared)
        if clause is not None:  # x names its cause, and y states it
            found.append((y is new, clause, "because"))
        clause = _covered_clause(x, y, shared, (_EN_SO, _ZH_SO))
        if clause is not None:  # x names its effect, and y states it
            found.append((x is new, clause, "so"))
    return found


def _after_clause(x: Side, y: Side, shared: frozenset[str]) -> str | None:
    for m in _EN_AFTER.finditer(x.text):
        clause = m["clause"].strip()
        if {stem(w) for w in re.findall(r"[A-Za-z]+", clause)} & _DISRUPTIONS and _covers(
            clause, y, shared
        ):
            return clause
    return None


def _covered_clause(
    x: Side, y: Side, shared: frozenset[str], patterns: tuple[re.Pattern[str], ...]
) -> str | None:
    """The first clause introduced by one of ``patterns`` in ``x`` that ``y`` states."""
    for pattern in patterns:
        for m in pattern.finditer(x.text):
            clause = m["clause"].strip(" ,，:：")
            if clause and _covers(clause, y, shared):
                return clause
    return None


def _covers(clause: str, y: Side, shared: frozenset[str]) -> bool:
    """``y`` (outside its own because/if clauses) says most of what ``clause`` says.

    English clauses are compared by content words, Chinese ones by character pairs (Chinese
    has no spaces to split words on). At least two covered words (or four covered Chinese
    characters) suffice; less, such as a one-word clause ("the rain", "下大雨"), also needs
    the memories to share a named entity or a subject tag.
    """
    words = [w.lower() for w in en_content_words(clause) if not is_generic(w)]
    pairs = _zh_pairs(clause)
    if not words and not pairs:
        return False
    index = TextIndex(y.main + " " + " ".join(y.tags))
    word_hits = sum(1 for w in words if _mentions(index, w))
    covered = [(i, p) for i, p in pairs if p in index.lower]
    hits = word_hits + len(covered)
    if hits == 0 or hits < CLAUSE_COVERAGE * (len(words) + len(pairs)):
        return False
    chars = {i for i, _ in covered} | {i + 1 for i, _ in covered}
    return word_hits + len(chars) / 2 >= 2 or bool(shared)


def _zh_pairs(clause: str) -> list[tuple[int, str]]:
    """(position, two adjacent Chinese characters), skipping "用户" and function characters."""
    text = clause.replace("用户", "  ")
    return [
        (i, text[i : i + 2]) for i in range(len(text) - 1)
        if _CJK.fullmatch(text[i]) and _CJK.fullmatch(text[i + 1])
        and text[i] not in _ZH_FUNCTION and text[i + 1] not in _ZH_FUNCTION
    ]


def _mentions(index: TextIndex, term: str) -> bool:
    """``TextIndex.contains``, plus English words of one family ("cancellation"/"cancelled")."""
    if index.contains(term):
        return True
    if not term.isascii():
        return False
    word = stem(term)
    return any(
        min(len(word), len(other)) >= _FAMILY_PREFIX
        and (word.startswith(other) or other.startswith(word))
        for other in index.stems
    )


def _is_conditional(side: Side) -> bool:
    return bool(_EN_IF.search(side.text) or _ZH_IF.search(side.text))


def _earlier_is_new(new: Side, old: Side) -> bool:
    """Time order: the earlier memory causes the later; a tie or no time keeps old → new."""
    if new.when is None or old.when is None:
        return False
    return new.when < old.when


_REASONS = {
    "because": ("The {x} memory gives '{c}' as the cause, and the {y} memory states it.",
                "{x}记忆把“{c}”作为原因，{y}记忆说的正是这件事。"),
    "so": ("The {x} memory says it led to '{c}', which the {y} memory states.",
           "{x}记忆说它导致了“{c}”，{y}记忆说的正是这件事。"),
    "if": ("The {x} memory holds only if '{c}', which the {y} memory states.",
           "{x}记忆以“{c}”为条件，{y}记忆说的正是这一点。"),
}


def _reason(cue: Cue, clause: str, cue_in_new: bool, zh: bool) -> str:
    """Why the pair was linked, in the language of the new memory."""
    clause = " ".join(clause.split())
    if len(clause) > 80:
        clause = clause[:79] + "…"
    en, cn = _REASONS[cue]
    if zh:
        x, y = ("新", "旧") if cue_in_new else ("旧", "新")
        return cn.format(x=x, y=y, c=clause)
    x, y = ("new", "existing") if cue_in_new else ("existing", "new")
    return en.format(x=x, y=y, c=clause)


def _side(node: RelationNode) -> Side:
    return Side(node.text, tuple(node.tags), tuple(node.entities), node.when)


def rules(ctx: RelationContext) -> RelationResponse:
    """Cause/condition cues naming the other memory, else shared entities/tags (see the module doc).

    Never CONFLICT: contradictions are the merge stage's to judge.
    """
    found = link(_side(ctx.new), _side(ctx.old))
    direction: Direction | None = None
    if found.new_is_source is not None:
        direction = "new_to_old" if found.new_is_source else "old_to_new"
    return RelationResponse(relation=found.relation, direction=direction, reason=found.reason)
