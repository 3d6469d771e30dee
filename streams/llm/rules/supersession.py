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

from memstream.streams.llm.rules.conflict_analysis import Statement, analyse, stem
from memstream.streams.llm.rules.modality import mood
from memstream.streams.prompts.conflict import Relation
from memstream.streams.text import lexicon as lx
from memstream.streams.text.changes import (
    SLACK,
    already_denied,
    change_marker,
    is_move,
    marker_clause,
    moves_within_home,
    unreal,
)
from memstream.streams.text.subjects import different_subjects, subject_of
from memstream.streams.text.words import zh_words

_YEAR = re.compile(r"(?<!\d)(19\d\d|20\d\d)(?!\d)")
# Stems (English) or characters (Chinese) two statements must share to be about one thing.
_SHARED = {"en": 1, "zh": 2}
# Stems (and characters) that only place a statement in time.
_WHEN_EN = frozenset({"last", "next", "week", "month", "year", "day", "ago", "yesterday",
                      "today", "tomorrow"})
_WHEN_ZH = frozenset("年月日号周天昨今明去前后上下个星期礼拜早晚")
_HINT_STEMS = tuple((name, frozenset(stem(w) for w in en)) for name, en, _ in lx.CHANGE_HINTS)
_WORD = re.compile(r"[a-z][a-z-]*")
# Markers that only say "now" (not what changed): 现在, 如今, now, these days, nowadays.
_NOW = re.compile(r"现在|如今|now|these days|nowadays", re.IGNORECASE)
# Words that set an earlier time beside that "now".
_THEN = re.compile(r"以前|之前|小时候|那时候?|那会儿?|当年|(?:上学|读书|上大学)的时候|"
                   r"\b(?:back when|back in|when i was|years ago)\b", re.IGNORECASE)
# A change that names what it changed, not the value it changed to: "switched my car
# insurance", "changed banks", "换了个部门", "把手机套餐…换". It ends only a statement about
# that thing ("I drive a Subaru" holds after a new insurer). "switched to X", "换成X" name
# the new value instead and are not read here.
_EN_CHANGED = re.compile(
    r"\b(?:switched|changed|swapped|replaced|upgraded|cancell?ed|moved)\s+"
    r"(?:all\s+(?:of\s+)?)?(?:my|our|the)\s+"
    r"(?!(?:whole\s+)?(?:family|kids|life|stuff|things|belongings)\b)"
    r"([a-z][a-z-]*(?:\s+[a-z][a-z-]*){0,2})|"
    r"\b(?:(?:got|bought)\s+(?:a|an|my)|my)\s+(?:new|used|second-hand)\s+"
    r"([a-z][a-z-]*(?:\s+[a-z][a-z-]*){0,2})|\b(?:switched|changed|swapped|moved)\s+"
    r"(?!(?:states|towns|cities|countries|houses|homes|flats|apartments|places|across|towards|"
    r"upstairs|downstairs|overseas|always|perhaps|this|us|is|was|has|as|plus|yes)\b)([a-z]+s)\b",
    re.IGNORECASE)
# A change made for someone else: "bought a used Tesla for my wife", "给我妈换了个手机"
_FOR_SOMEONE = re.compile(
    r"\bfor (?:my|our) (?:wife|husband|partner|son|daughter|kids?|mom|mum|dad|mother|father|"
    r"sister|brother|girlfriend|boyfriend|parents|grandma|grandpa|friend)\b|"
    r"给(?:我|咱)?(?:老婆|老公|爸|妈|爸妈|儿子|女儿|孩子|女朋友|男朋友|爷爷|奶奶)"
    r"(?:买|换|办|订)", re.IGNORECASE)
_ZH_NUMBER = re.compile(r"(?:手机|电话)号码?")
_EN_STOP_AT = frozenset({"from", "to", "for", "with", "at", "in", "on", "and", "or", "but",
                         "over", "into", "because", "since", "after", "last", "this", "so"})
_ZH_CHANGED = re.compile(r"把([\u4e00-\u9fff]{1,8}?)(?:换|改)|"
                         r"(?:换|改)了(?:一?[个辆台部只条款双件]|家(?!庭)|份)?([\u4e00-\u9fff]{1,5})")


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
    if is_move(marker) and moves_within_home(clause):
        return None  # "我搬到次卧去睡了": the home stays
    if already_denied(existing, marker):
        return None  # "I don't smoke", then "I quit in college": nothing ended
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
    about_a = _about(existing, a)
    # what the change names as changed, in its clause or the one before ("今年换了医保，从Blue
    # Cross换成了Aetna"); a move that names a thing ("moved all my accounts to Ally") moves that
    thing = _changed_thing(clause) or _changed_thing(so_far[:len(so_far) - len(clause)])
    moves_home = is_move(marker) and thing is None
    if not _same_thing(a, b, moves_home, relation, about_a, _about(new, b)):
        return None
    if _NOW.fullmatch(marker) and _THEN.search(new) and not _now_about(clause, a, about_a):
        return None  # "以前单身的时候…，现在哪有时间": what is so now is something else
    if thing is not None and not _touches(thing, existing, a, b, about_a):
        return None  # "switched my car insurance" leaves the car
    return f"an explicit change ({marker!r}) replaces the earlier statement"


def _now_about(clause: str, a: Statement, about_a: frozenset[str]) -> bool:
    """Whether the clause that says what holds *now* is about what the earlier statement
    (analysed as ``a``) states: a word, name or attribute they share. A bare "now" set
    against another time the statement also tells of ("when I was single I gamed all
    weekend, now I have no time") says what changed in its own clause only."""
    c = analyse(clause)
    return bool(c.entities & a.entities or _about(clause, c) & about_a) or _share_words(a, c)


def _not_the_same_person(existing: str, new: str, clause: str) -> bool:
    """Whether the change is someone else's: the clause that says it is about a relative or
    friend ("my dad quit smoking"), or made for one ("bought a new car for my wife"), or about
    the user while the earlier statement is about a relative; otherwise the subject rules of
    the relation judge (names, speakers)."""
    if _FOR_SOMEONE.search(clause):
        return True
    said, before = subject_of(clause).keys, subject_of(existing).keys
    if said and all(k.startswith("rel:") for k in said):
        return not said & before  # the sister's move ends only what was said of the sister
    if "self" in said:  # "I …": only a relative's statement is someone else's
        return bool(before) and all(k.startswith("rel:") for k in before)
    return different_subjects(existing, new) is not None


def _about(text: str, s: Statement) -> frozenset[str]:
    """The attributes ``text`` (analysed as ``s``) is about: the judge's frames and hints."""
    if s.lang == "zh":
        text = _ZH_NUMBER.sub("号码", text)  # a phone number is not the phone
        hinted = {name for name, _, zh in lx.CHANGE_HINTS if any(w in text for w in zh)}
    else:
        stems = {stem(w) for w in _WORD.findall(text.lower())}
        hinted = {name for name, en in _HINT_STEMS if en & stems}
    return s.frames | hinted


def _same_thing(a: Statement, b: Statement, moves_home: bool, relation: Relation,
                about_a: frozenset[str], about_b: frozenset[str]) -> bool:
    """Whether the change is about what the earlier statement states. ``about_*``, the
    attributes each is about, only ever add evidence: a statement mentions more than the one
    attribute it sets ("the gym near the office"), so two statements are told apart by the
    judge's frames, unless what they are about overlaps ("took the metro to work" and "ride
    my e-bike to the office": a commute)."""
    if moves_home and "residence" not in about_a \
            and (a.frames or not a.entities & b.entities):
        return False  # a move ends a home (or what was said of the place left), not a job
    if a.frames and b.frames and not a.frames & b.frames and not about_a & about_b:
        return False  # different attributes: where one lives, where one works
    if relation == "contradictory" or about_a & about_b or a.entities & b.entities:
        return True
    if a.lang != b.lang:
        return True  # words cannot be compared: the similarity that made them candidates
    return _share_words(a, b)


def _share_words(a: Statement, b: Statement) -> bool:
    """Whether two statements in one language share enough words that say more than when."""
    return a.lang == b.lang and \
        len(_topical(a.content, a.lang) & _topical(b.content, b.lang)) >= _SHARED[a.lang]


def _changed_thing(clause: str) -> tuple[str, ...] | None:
    """The words naming the thing a change says it changed, head last ("my PureGym
    membership" -> ("puregym", "membership"); "部门"), or None when it names none (or names
    the new value: "换了个小米13")."""
    if m := _EN_CHANGED.search(clause):
        if m[3]:
            return (m[3].lower(),)
        if m[2] and re.search(r"[A-Z0-9]", m[2]):
            return None  # "bought a used Tesla Model 3": a make, the new value
        words: list[str] = []
        for word in (m[1] or m[2]).lower().split():
            if word in _EN_STOP_AT:
                break
            words.append(word)
        return tuple(words) or None
    if m := _ZH_CHANGED.search(clause):
        named = re.split(r"[从由跟]", m[1] or m[2])[0]  # 把手机套餐从移动换到联通: 手机套餐
        named = _ZH_NUMBER.sub("号码", named)  # 换了手机号: the number, not the phone
        if re.search(r"[A-Za-z0-9]", named) or re.match(r"\s*[A-Za-z0-9]", clause[m.end():]):
            return None  # a model or a name: the new value
        tagged = [(w, tag) for w, tag in zh_words(named) if tag.startswith(("n", "v", "j"))]
        if not tagged or any(tag in ("nr", "ns", "nt", "nz") for _, tag in tagged):
            return None  # a name among them: the new value (换了辆比亚迪海豚)
        return tuple(w for w, _ in tagged)
    return None


def _touches(thing: tuple[str, ...], existing: str, a: Statement, b: Statement,
             about_a: frozenset[str]) -> bool:
    """Whether the earlier statement is about ``thing`` (head last): it names one of its
    words or a name the change also names ("from Vodafone"), or the head's attribute is one
    it is about."""
    if a.entities & b.entities:
        return True
    head = thing[-1]
    if a.lang == b.lang:
        if head.isascii():
            said = {stem(w) for w in _WORD.findall(existing.lower())}
            if any(stem(w) in said for w in thing):
                return True
        elif any(w in existing for w in thing):
            return True
    return bool(_about(head, analyse(head)) & about_a)


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
