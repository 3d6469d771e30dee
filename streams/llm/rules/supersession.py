"""Whether a newer statement ends or replaces an earlier one, without a model.

A contradiction found by surface cues is a suspicion (``streams.core.conflicts``), but a
statement that says outright that something changed — "I moved from Lyon to Berlin", "I
don't eat meat anymore", "I quit Google", "我已经不抽烟了", "我搬到了北京" — is no guess: it
closes the earlier statement's validity. Only that: the earlier statement stays, with the
time it stopped holding.

Near-misses never close anything. The new statement must be a settled fact in the
indicative (a plan, a trip, a wish or a hypothetical is held back: "I'm thinking of moving
to Berlin", "if I moved to Berlin…", "如果我搬到柏林"), about the same subject (the relation
judge's subject rules: "my sister moved from Lyon to Berlin" is about the sister), about the
same attribute where both name one (home versus employer), and not about an earlier time
than the statement it would close ("in 2015 I moved from Paris to Lyon", said after "I live
in Lyon", tells how the user got there).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from memstream.streams.llm.rules.conflict_analysis import analyse
from memstream.streams.llm.rules.modality import mood
from memstream.streams.prompts.conflict import Relation
from memstream.streams.text.subjects import different_subjects
from memstream.streams.text.words import words_of

# An explicit change of state in English: a move, an ending, a switch, a state that no
# longer holds. ("now" alone is not one: "I'm in Berlin now" may be a trip.)
_EN_CHANGE = re.compile(
    r"\b(?:moved|relocated|no longer|(?:any|no) ?more|quit|quitting|resigned|retired|"
    r"stopped|gave up|given up|left (?:my|the|\w+ (?:job|school|team|club|gym|company))|"
    r"left\b(?= [A-Z])|switched|changed (?:my|to|jobs?|teams?)|sold (?:my|the|our)|"
    r"got rid of|broke up|split up|divorced|separated|got married|married now|"
    r"used to|not any ?more|these days|from now on|now (?:live|work|use|drive|have|own|"
    r"eat|am|study|go|play|take|prefer|like)|instead of|replaced|traded (?:in )?(?:my|the)|"
    r"again now|started (?:eating|smoking|drinking|working|living)|(?:is|was) (?:sold|gone)|"
    r"passed away|died)\b",
    re.IGNORECASE)
_ZH_CHANGE = tuple(words_of("""
    搬到 搬去 搬回 搬家 已经不 不再 再也不 换成 换了 改成 改为 辞职
    离职 辞掉 跳槽 戒了 戒掉 卖了 卖掉 分手 离婚 退休 退出 转学 转行 现在 如今 已经没 去世 走了
"""))
# 不/没 … 了 with at most six characters between: 不抽烟了, 不吃肉了, 没养狗了
_ZH_NOT_ANY_MORE = re.compile(r"[不没][^，。,.!?！？]{1,6}了")

# A statement that supposes, asks or wishes rather than states.
_EN_UNREAL = re.compile(
    r"\b(?:if|would|could|should|suppose|supposing|imagine|wonder|whether|unless|maybe|"
    r"perhaps|might|in case)\b|\?", re.IGNORECASE)
_ZH_UNREAL = ("如果", "假如", "要是", "万一", "假设", "的话", "也许", "或许", "可能", "吗", "？")
_YEAR = re.compile(r"(?<!\d)(19\d\d|20\d\d)(?!\d)")


def change_marker(text: str) -> str | None:
    """The words by which ``text`` says something changed, or None."""
    if m := _EN_CHANGE.search(text):
        return m[0]
    for word in _ZH_CHANGE:
        if word in text:
            return word
    if m := _ZH_NOT_ANY_MORE.search(text):
        return m[0]
    return None


def unreal(text: str) -> bool:
    """A supposition, question or wish (not a statement of what is)."""
    return bool(_EN_UNREAL.search(text)) or any(w in text for w in _ZH_UNREAL)


def ends(existing: str, new: str, relation: Relation, *, existing_since: datetime | None,
         new_since: datetime | None) -> str | None:
    """Why ``new`` ends or replaces ``existing`` (the relation judge said ``relation``), or
    None when it does not. ``*_since``: when each began to hold, in the conversation's time,
    if known."""
    marker = change_marker(new)
    if marker is None or relation == "redundant":
        return None
    if mood(new) != "fact" or unreal(new):
        return None
    if different_subjects(existing, new):
        return None
    if existing_since is not None and new_since is not None \
            and new_since < existing_since - timedelta(days=31):
        return None  # told later, but about an earlier time (a month: "last month" is the 1st)
    if existing_since is not None and _names_earlier_year(new, existing_since):
        return None
    a, b = analyse(existing), analyse(new)
    if marker.lower() == "used to" and not a.entities <= b.entities:
        return None  # "I used to live in Paris" tells of the past, not of Lyon
    if any(_arrives_at(new, place) for place in a.entities):
        return None  # "I moved to Lyon" after "I live in Lyon": how the user got there
    if a.frames and b.frames and not a.frames & b.frames:
        return None  # different attributes: where one lives, where one works
    # the judge found no contradiction: only an ending of what the earlier one states ("I
    # quit Google" after "I work at Google"), and the two must share what it is about
    if relation == "independent" and (not (b.negative or _ending(marker))
                                      or not (a.content & b.content or a.entities & b.entities)):
        return None
    return f"an explicit change ({marker!r}) replaces the earlier statement"


def _ending(marker: str) -> bool:
    low = marker.lower()
    return any(w in low for w in (
        "quit", "resign", "retire", "stop", "gave up", "given up", "left", "sold", "got rid",
        "broke up", "split", "divorc", "separat", "more", "longer", "used to", "passed",
        "died", "gone", "辞", "离", "戒", "卖", "分手", "退", "不", "没", "去世", "走了"))


def _arrives_at(text: str, place: str) -> bool:
    """The statement moves (back) *to* ``place``, the earlier statement's value."""
    if re.search(rf"\b(?:to|into|back in)\s+(?:the\s+)?{re.escape(place)}\b", text,
                 re.IGNORECASE):
        return True
    return any(f"{verb}{place}" in text for verb in ("搬到", "搬去", "搬回", "来到", "回到"))


def _names_earlier_year(text: str, since: datetime) -> bool:
    """The statement dates itself to a year before ``since``."""
    return any(int(y) < since.year for y in _YEAR.findall(text))
