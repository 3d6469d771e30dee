"""Whether a newer statement ends or replaces an earlier one, without a model.

A contradiction found by surface cues is a suspicion (``streams.core.conflicts``), but a
statement that says outright that something changed — "I moved from Lyon to Berlin", "I
don't eat meat anymore", "I quit Google", "我已经不抽烟了", "我搬到了北京" — is no guess: it
closes the earlier statement's validity. Only that: the earlier statement stays, with the
time it stopped holding.

Near-misses never close anything. The clause that says what changed must be a settled fact
in the indicative (a plan, a trip, a wish or a hypothetical is held back: "I'm thinking of
moving to Berlin", "if I moved to Berlin…", "如果我搬到柏林"), about the user and not another
person ("my sister moved from Lyon to Berlin"), not about an earlier time than the statement
it would close ("in 2015 I moved from Paris to Lyon", said after "I live in Lyon", tells how
the user got there), and about what the earlier one states: the same attribute (a move ends
a home, not a job), a name or word they share, or — across languages, where words cannot be
compared — what made the two similar enough to be compared at all.
"""

from __future__ import annotations

import re
from datetime import datetime

from memstream.streams.llm.rules.conflict_analysis import Statement, analyse
from memstream.streams.llm.rules.modality import mood
from memstream.streams.prompts.conflict import Relation
from memstream.streams.text.changes import (
    SLACK,
    change_marker,
    is_move,
    marker_clause,
    unreal,
)
from memstream.streams.text.subjects import different_subjects, subject_of

_YEAR = re.compile(r"(?<!\d)(19\d\d|20\d\d)(?!\d)")
# Stems (English) or characters (Chinese) two statements must share to be about one thing.
_SHARED = {"en": 1, "zh": 2}
# Stems (and characters) that only place a statement in time.
_WHEN_EN = frozenset({"last", "next", "week", "month", "year", "day", "ago", "yesterday",
                      "today", "tomorrow"})
_WHEN_ZH = frozenset("年月日号周天昨今明去前后上下个星期礼拜早晚")


def ends(existing: str, new: str, relation: Relation, *, existing_since: datetime | None,
         new_since: datetime | None) -> str | None:
    """Why ``new`` ends or replaces ``existing`` (the relation judge said ``relation``), or
    None when it does not. ``*_since``: when each began to hold, in the conversation's time,
    if known."""
    marker = change_marker(new)
    if marker is None:
        return None
    clause, so_far = marker_clause(new, marker)
    # what leads up to the change, too: "I'm thinking about giving the corgi away, I don't
    # have time anymore" is a plan; "我不学法语了，打算明年去德国" is a change, then a plan
    if mood(so_far) != "fact" or unreal(so_far):
        return None
    a, b = analyse(existing), analyse(new)
    if _not_the_same_person(existing, new, clause):
        return None
    if existing_since is not None and new_since is not None \
            and new_since < existing_since - SLACK:
        return None  # told later, but about an earlier time
    if existing_since is not None and _names_earlier_year(new, existing_since):
        return None
    if marker.lower() == "used to" and not a.entities <= b.entities:
        return None  # "I used to live in Paris" tells of the past, not of Lyon
    if not any(_leaves(new, place) for place in a.entities) \
            and any(_arrives_at(new, place) for place in a.entities):
        return None  # "I moved to Lyon" after "I live in Lyon": how the user got there
    if not _same_thing(a, b, marker, relation):
        return None
    return f"an explicit change ({marker!r}) replaces the earlier statement"


def _not_the_same_person(existing: str, new: str, clause: str) -> bool:
    """Whether the change is someone else's: the clause that says it is about a relative or
    friend ("my dad quit smoking"), or about the user while the earlier statement is about a
    relative; otherwise the subject rules of the relation judge (names, speakers)."""
    said, before = subject_of(clause).keys, subject_of(existing).keys
    if said and all(k.startswith("rel:") for k in said):
        return not said & before  # the sister's move ends only what was said of the sister
    if "self" in said:  # "I …": only a relative's statement is someone else's
        return bool(before) and all(k.startswith("rel:") for k in before)
    return different_subjects(existing, new) is not None


def _same_thing(a: Statement, b: Statement, marker: str, relation: Relation) -> bool:
    """Whether the change is about what the earlier statement states."""
    if is_move(marker) and "residence" not in a.frames \
            and (a.frames or not a.entities & b.entities):
        return False  # a move ends a home (or what was said of the place left), not a job
    if a.frames and b.frames and not a.frames & b.frames:
        return False  # different attributes: where one lives, where one works
    if relation == "contradictory" or a.frames & b.frames or a.entities & b.entities:
        return True
    if a.lang != b.lang:
        return True  # words cannot be compared: the similarity that made them candidates
    return len(_topical(a.content, a.lang) & _topical(b.content, b.lang)) >= _SHARED[a.lang]


def _topical(content: frozenset[str], lang: str) -> frozenset[str]:
    """Content words without those that only say when ("last week", "上个月"): two
    statements dated alike are not about one thing for that."""
    if lang == "zh":
        return frozenset(c for c in content if c not in _WHEN_ZH)
    return content - _WHEN_EN


def _leaves(text: str, place: str) -> bool:
    """The statement moves away *from* ``place``."""
    return bool(re.search(rf"\bfrom\s+(?:the\s+)?{re.escape(place)}\b", text, re.IGNORECASE)) \
        or f"从{place}" in text


def _arrives_at(text: str, place: str) -> bool:
    """The statement moves (back) *to* ``place``, the earlier statement's value."""
    if re.search(rf"\b(?:to|into|back in)\s+(?:the\s+)?{re.escape(place)}\b", text,
                 re.IGNORECASE):
        return True
    return any(f"{verb}{place}" in text for verb in ("搬到", "搬去", "搬回", "来到", "回到"))


def _names_earlier_year(text: str, since: datetime) -> bool:
    """The statement dates itself to a year before ``since``."""
    return any(int(y) < since.year for y in _YEAR.findall(text))
