"""The deterministic relation judge: contradictory, redundant or independent, without a model.

Order of the rules: a pair about different subjects (``streams.core.subjects``; where that
cannot tell, the analysis' own subject) is independent; otherwise the
contradiction rules run (a different value of a one-value attribute, a negated
statement, a changed number/date, a changed place/name, a reported change of a
detail); then the redundancy rules (one contains the other, or the embedding
similarity reaches the merge threshold and neither adds a detail the other lacks);
everything else is independent. Each rule returns a short reason or None.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from memstream.streams.llm.rules.conflict_analysis import Statement, analyse
from memstream.streams.llm.rules.modality import held_back, when
from memstream.streams.prompts.conflict import (
    JudgeContext,
    JudgeResponse,
)
from memstream.streams.text import lexicon as lx
from memstream.streams.text.subjects import compare, subject_of, with_entities

Relation = Literal["contradictory", "redundant", "independent"]
Rule = Callable[[Statement, Statement], str | None]


@dataclass(frozen=True)
class Verdict:
    relation: Relation
    reason: str


def judge(
    existing: str, new: str, similarity: float, merge_threshold: float,
    existing_entities: Iterable[str] = (), new_entities: Iterable[str] = (),
) -> Verdict:
    """How ``new`` relates to ``existing``, with a one-line reason."""
    sa = with_entities(subject_of(existing), existing_entities)
    sb = with_entities(subject_of(new), new_entities)
    subjects = compare(sa, sb, existing, new)
    if subjects == "different":
        return Verdict("independent", f"different subjects: {sa.describe()} vs {sb.describe()}")
    a, b = analyse(existing), analyse(new)
    if (apart := held_back(existing, new, a.negative != b.negative)) is not None:
        return Verdict("independent", apart)
    if subjects == "unknown" and not same_subject(a, b):
        return Verdict("independent", f"different subjects: {_who(a)} vs {_who(b)}")
    for rule in CONTRADICTION_RULES:
        reason = rule(a, b)
        if reason:
            return Verdict("contradictory", reason)
    reason = redundancy(a, b, similarity, merge_threshold)
    if reason:
        return Verdict("redundant", reason)
    return Verdict("independent", _why_independent(a, b, similarity, merge_threshold))


# --------------------------------------------------------------------------- subjects


def same_subject(a: Statement, b: Statement) -> bool:
    """Same person: shared aliases, or one names a relation/person the other text mentions."""
    if a.subject & b.subject:
        return True
    return _mentions(b, a.subject) or _mentions(a, b.subject)


def _mentions(stmt: Statement, aliases: frozenset[str]) -> bool:
    low = stmt.text.lower()
    for alias in aliases:
        kind, _, name = alias.partition(":")
        if kind == "name" and name and name in low:
            return True
        if kind == "rel" and _relation_mentioned(name, stmt.text, low):
            return True
    return False


def _relation_mentioned(relation: str, text: str, low: str) -> bool:
    if relation in low.split() or f"{relation}," in low or f"{relation}." in low:
        return True
    return any(word in text for word, rel in lx.ZH_RELATIONS.items() if rel == relation)


def _who(stmt: Statement) -> str:
    rel = sorted(s for s in stmt.subject if s.startswith("rel:"))
    return rel[0].removeprefix("rel:") if rel else sorted(stmt.subject)[0].removeprefix("name:")


# --------------------------------------------------------------------------- overlap measures


def shared(a: Statement, b: Statement) -> frozenset[str]:
    return a.content & b.content


def coverage(a: Statement, b: Statement) -> float:
    """Share of the smaller statement's content that the other one also has (1.0 if both empty)."""
    smaller = min(len(a.content), len(b.content))
    if smaller == 0:
        return 1.0 if not (a.content or b.content) else 0.0
    return len(shared(a, b)) / smaller


def _slack(a: Statement, b: Statement) -> int:
    """How many differing tokens still count as "the same wording": characters in Chinese."""
    return 2 if "zh" in (a.lang, b.lang) else 1


ValueDiff = tuple[str, frozenset[str], frozenset[str]]


def differing_values(a: Statement, b: Statement) -> list[ValueDiff]:
    """Value kinds both statements give, with different values (e.g. date 06-12 vs 06-19)."""
    ka, kb = a.value_kinds(), b.value_kinds()
    return [(k, ka[k], kb[k]) for k in sorted(ka.keys() & kb.keys()) if ka[k] != kb[k]]


# --------------------------------------------------------------------------- contradiction rules


def value_word_conflict(a: Statement, b: Statement) -> str | None:
    """Marital status or diet stated differently (single vs married; vegetarian vs eats meat)."""
    for label, va, vb in (("marital status", a.marital, b.marital), ("diet", a.diet, b.diet)):
        if va and vb and va != vb:
            return f"same subject, different {label}: {va} vs {vb}"
    return None


def favorite_conflict(a: Statement, b: Statement) -> str | None:
    """The same "favourite X" with a different answer."""
    for frame in sorted(a.frames & b.frames):
        if frame.startswith("favorite:") and a.content - b.content and b.content - a.content:
            return f"same subject, different {frame.replace(':', ' ')}"
    return None


def place_conflict(a: Statement, b: Statement) -> str | None:
    """A one-value attribute (home, employer, car, phone) naming a different place or name."""
    slots = sorted(f for f in a.frames & b.frames if not f.startswith("favorite:"))
    if not slots:
        return None
    only_a, only_b = a.entities - b.entities, b.entities - a.entities
    if only_b and (only_a or a.change or b.change):
        old, new = ", ".join(sorted(only_a)) or "before", ", ".join(sorted(only_b))
        return f"same subject and {slots[0]}, different name/place: {old} vs {new}"
    return None


_CALENDAR_KINDS = frozenset({"date", "month", "year", "day", "weekday", "time"})


def value_conflict(a: Statement, b: Statement) -> str | None:
    """Same statement except for a number, or a date that was changed (rescheduled, moved to).

    Two dates of the same kind of event are usually two occurrences ("visited Rome in
    2019" / "in 2023"), so a calendar difference needs a word of change or a date that
    belongs to the thing itself (a birthday).
    """
    diffs = [d for d in differing_values(a, b)
             if d[0] not in _CALENDAR_KINDS or a.change or b.change or _fixed_date(a, b)]
    if not diffs:
        return None
    only = len(a.content - b.content) + len(b.content - a.content)
    counted = any(kind.startswith("num:") and kind != "num:" for kind, _, _ in diffs)
    reported = (a.change or b.change) and counted and coverage(a, b) >= 0.5
    if only <= _slack(a, b) or reported:
        kind, va, vb = diffs[0]
        kind = "number" if kind.startswith("num:") else kind
        return f"same subject and detail, different {kind}: {_fmt(va)} vs {_fmt(vb)}"
    return None


def _fixed_date(a: Statement, b: Statement) -> bool:
    return any(w in s.text.lower() for s in (a, b) for w in lx.FIXED_DATE_WORDS)


def negation_conflict(a: Statement, b: Statement) -> str | None:
    """One statement negates the other (not / never / no longer / 不 / 没有 / 不再)."""
    if a.negative == b.negative:
        return None
    neg = a if a.negative else b
    common = shared(a, b)
    if common and len(common) / max(1, len(neg.content)) >= 2 / 3:
        return "one statement negates what the other states"
    return None


MAX_REPLACED_WORDS = 2


def changed_detail(a: Statement, b: Statement) -> str | None:
    """A change is reported (moved, switched, now, 换成, 现在) and one detail was replaced."""
    if not (a.change or b.change):
        return None
    only_a, only_b = a.content - b.content, b.content - a.content
    # A replaced detail: both sides differ, but only in a few words (a new event that merely
    # shares the subject, "the flight was delayed" vs "the user missed the meeting", is not).
    few = max(len(only_a), len(only_b)) <= MAX_REPLACED_WORDS
    if only_a and only_b and few and shared(a, b) and coverage(a, b) >= 0.5:
        return "a change of state replaces a detail of the earlier statement"
    return None


CONTRADICTION_RULES: tuple[Rule, ...] = (
    value_word_conflict,
    favorite_conflict,
    place_conflict,
    value_conflict,
    negation_conflict,
    changed_detail,
)


def _fmt(values: frozenset[str]) -> str:
    return "/".join(sorted(values))


# --------------------------------------------------------------------------- redundancy


def redundancy(a: Statement, b: Statement, similarity: float, merge_threshold: float) -> str | None:
    """Same information: agreeing value words, containment, or a merge-level similarity.

    Never when a name, place, number or date differs, nor when only one of the two is dated:
    "lives in Lyon" and "lived in Lyon in 2019" may be two different times."""
    if differing_values(a, b) or (a.entities - b.entities and b.entities - a.entities):
        return None
    if _calendar(a) != _calendar(b):
        return None
    if (a.diet and a.diet == b.diet) or (a.marital and a.marital == b.marital):
        return "both state the same " + ("diet" if a.diet and a.diet == b.diet else "status")
    only_a, only_b = a.content - b.content, b.content - a.content
    if (not only_a or not only_b) and len(shared(a, b)) >= _slack(a, b) + 1:
        return "one statement contains the other"
    if similarity >= merge_threshold and (not only_a or not only_b):
        return f"similarity {similarity:.2f} >= {merge_threshold:.2f} and no differing detail"
    return None


def _calendar(stmt: Statement) -> frozenset[str]:
    """The statement's dates and relative times ("next week"), as comparable strings."""
    dated = {f"{kind}:{value}" for kind, value in stmt.values if kind in _CALENDAR_KINDS}
    return frozenset(dated) | when(stmt.text)


def _why_independent(a: Statement, b: Statement, similarity: float, threshold: float) -> str:
    if differing_values(a, b):
        return "different facts: details differ without one replacing the other"
    if coverage(a, b) < 0.5:
        return "different facts about the same subject"
    return f"each adds a different detail (similarity {similarity:.2f}, merge at {threshold:.2f})"


def informativeness(text: str) -> int:
    """How much a statement says: content tokens, values and names (used to pick a survivor)."""
    stmt = analyse(text)
    return len(stmt.content) + len(stmt.values) + len(stmt.entities)


def rules(ctx: JudgeContext) -> JudgeResponse:
    """Deterministic judgement without a model (see the module doc)."""
    verdict = judge(ctx.existing.text, ctx.new.text, ctx.similarity, ctx.merge_threshold,
                    ctx.existing.entities, ctx.new.entities)
    return JudgeResponse(relation=verdict.relation, reason=verdict.reason)
