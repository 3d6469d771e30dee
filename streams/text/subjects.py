"""Who a memory statement is about, so facts about different subjects are never merged.

A merge archives one of two memories; if they are about different people, places or
things ("Anna lives in Paris." / "Boris lives in Rome."), that is data loss, however
similar their embeddings. ``compare`` reads the leading subject of each statement —
the user ("I", "my car", "The user", 我, 用户), a relation of the user or of a named
speaker ("my sister", "the user's son Leo", 我的妹妹), a proper name ("Anna Kowalski",
"the Eiffel Tower", "iPhone 15", 小王, 王芳) or a leading "Name:" speaker prefix — and
answers ``different`` only when both subjects are certain, disjoint, and neither text
mentions the other's subject; anything unclear is ``unknown`` and left to the judge.
Metadata entities stand in when the text opens with a pronoun ("She moved to Rome.").
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from memstream.streams.text import lexicon as lx
from memstream.streams.text.words import is_mostly_chinese, words_of

Comparison = Literal["same", "different", "unknown"]
SELF = "self"

_CJK = r"\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_NAME_WORD = r"(?:[A-Z][\w'’.-]*|[a-z]+[A-Z][\w-]*)"  # Anna, O'Neil, Dr., iPhone
_NAME = rf"{_NAME_WORD}(?:\s+(?:{_NAME_WORD}|\d[\w.]*))*"  # Anna Kowalski, Pixel 8
_SPEAKER = re.compile(rf"\s*({_NAME_WORD}(?:\s+{_NAME_WORD}){{0,3}}|[{_CJK}]{{2,4}})\s*[:：]\s*")
_EN_FIRST_PERSON = re.compile(r"(?:I|I'm|I've|I'd|I'll|I’m|I’ve|I’d|I’ll|We|We're|We’re)\b")
_EN_PRONOUN = re.compile(r"(?:He|She|They|It|His|Her|Their|Its|This|That|These|Those)\b")
_EN_LEAD_FILLER = re.compile(
    r"(?:(?:now|recently|currently|today|yesterday|also|then|later|still|actually|so|and|but|"
    r"well|oh|lately|meanwhile|nowadays|finally)\b[,\s]*)+", re.IGNORECASE)
_EN_LEAD_CLAUSE = re.compile(r"[^,:.]{1,40},\s+")  # "Every weekend, …", "In 2023, …"
# Capitalised sentence openers that name nobody (besides the lexicon's list).
_NOT_SUBJECT_NAMES = frozenset(lx.EN_NOT_NAMES | {
    "my", "our", "your", "every", "on", "in", "at", "once", "there", "here", "what", "who",
    "it", "he", "she", "they", "we", "his", "her", "their", "its", "me", "yes", "no", "today",
    "yesterday", "tomorrow", "now", "recently", "also", "then", "dr", "mr", "mrs", "ms", "prof",
    "some", "all", "most", "many", "one", "two", "both", "neither", "nobody", "everyone",
})
_EN_REL = (r"(?:(older|elder|big|oldest|eldest|younger|little|youngest|baby|best|twin|ex|late)"
           r"[-\s]+)?([a-z-]+)")
_TITLES = frozenset({"dr", "dr.", "mr", "mr.", "mrs", "mrs.", "ms", "ms.", "prof", "prof.", "the"})

# Common Chinese surnames (single and compound): a name is a surname and one or two characters.
_ZH_COMPOUND_SURNAMES = ("欧阳", "司马", "诸葛", "上官", "东方", "慕容", "令狐", "皇甫", "尉迟")
_ZH_SURNAMES = frozenset(
    "王李张刘陈杨黄赵吴周徐孙马朱胡郭何林罗高郑梁谢宋唐许韩冯邓曹彭曾肖田董袁潘于蒋蔡余杜叶程"
    "苏魏吕丁任沈姚卢姜崔钟谭陆汪范金石廖贾夏韦付方白邹孟熊秦邱江尹薛闫段雷侯龙史陶黎贺顾毛"
    "郝龚邵万钱严覃武戴莫孔向汤常温康施文牛樊葛邢安齐易乔伍庞颜倪庄聂章鲁岳翟殷詹申欧耿关兰"
    "焦俞左柳甘祝包宁尚符舒阮柯纪梅童凌毕单季裴霍涂成苗谷盛曲翁冉骆蓝路游辛靳管柴蒙鲍华喻祁"
    "蒲房滕屈饶解牟艾尤阳时穆农司卓古吉缪简车项连芦麦褚娄窦戚岑景党宫费卜冷晏席卫米柏宗瞿桂"
    "全佟应臧闵苟邬边卞姬师和仇栾隋商刁沙荣巫寇桑郎甄丛仲虞敖巩明佘池查麻苑迟邝"
)
# Characters that start the predicate, so a name ends before them (王芳住在… → 王芳).
_ZH_NAME_STOP = frozenset(
    "住在是喜爱每搬的做从去有和跟会要想已现今最也都正把被对给说叫开养当打弹吃喝看买学教工上"
    "下来不没很还又就才将曾一了与及常经平总周星今昨前后年月日天早晚"
)
# Finer relations than the lexicon's: an elder and a younger sister are two people.
_ZH_FINE_RELATIONS = {"姐姐": "elder-sister", "妹妹": "younger-sister", "哥哥": "elder-brother",
                      "弟弟": "younger-brother", "爷爷": "paternal-grandfather",
                      "奶奶": "paternal-grandmother", "外公": "maternal-grandfather",
                      "外婆": "maternal-grandmother"}
_EN_EXTRA_RELATIONS = {w: w for w in words_of(
    "classmate coach tutor stepmother stepfather stepson stepdaughter mother-in-law "
    "father-in-law sister-in-law brother-in-law buddy pal nanny babysitter grandson "
    "granddaughter grandchild twin pet puppy kitten parrot hamster horse baby toddler "
    "ex-wife ex-husband ex-girlfriend ex-boyfriend best-friend")}
_KINDS = frozenset({"elder", "younger", "best", "twin", "ex", "late", "paternal", "maternal"})
_EN_MODIFIERS = {"older": "elder", "elder": "elder", "big": "elder", "oldest": "elder",
                 "eldest": "elder", "younger": "younger", "little": "younger",
                 "youngest": "younger", "baby": "younger", "best": "best", "twin": "twin",
                 "ex": "ex", "late": "late"}
_ZH_LEAD_TIME = re.compile(
    r"(?:(?:现在|最近|目前|如今|今天|昨天|前天|明天|今年|去年|明年|上周|下周|这周|本周|周末|"
    r"平时|每天|每周[一二三四五六日天]?|每个周末|\d{4}年(?:\d{1,2}月(?:\d{1,2}[日号])?)?|"
    r"\d{1,2}月(?:\d{1,2}[日号])?)[，,]?)+")
_ZH_RELATIONS = {**lx.ZH_RELATIONS, "母亲": "mother", "父亲": "father", "太太": "wife",
                 "老婆": "wife", "老公": "husband", "姐": "sister", "妹": "sister",
                 "闺蜜": "best-friend", "好朋友": "best-friend", "表姐": "cousin", "表妹": "cousin",
                 "表哥": "cousin", "表弟": "cousin", "堂姐": "cousin", "堂妹": "cousin",
                 "堂哥": "cousin", "堂弟": "cousin", "舅舅": "uncle", "叔叔": "uncle",
                 "阿姨": "aunt", "姑姑": "aunt", "孙子": "grandson", "孙女": "granddaughter",
                 "同学": "classmate", "教练": "coach", "宝宝": "baby", "男友": "boyfriend",
                 "女友": "girlfriend", "未婚夫": "fiance", "未婚妻": "fiancee", "领导": "boss",
                 "爸": "father", "妈": "mother", "老爸": "father", "老妈": "mother",
                 "爸妈": "parents", "哥": "brother", "弟": "brother"}
_ZH_RELS = "|".join(sorted(_ZH_RELATIONS, key=len, reverse=True))
_ZH_PRONOUNS = ("他们", "她们", "它们", "他", "她", "它", "这", "那")


@dataclass(frozen=True)
class Subject:
    """The aliases of whom a statement is about; empty when the text does not say clearly."""

    keys: frozenset[str]  # "self", "self@melanie", "rel:self/sister", "name:anna kowalski"
    speaker: str = ""  # a leading "Name:" prefix, lower case

    @property
    def certain(self) -> bool:
        return bool(self.keys)

    def describe(self) -> str:
        names = sorted(k.removeprefix("name:") for k in self.keys if k.startswith("name:"))
        rels = sorted(k.removeprefix("rel:") for k in self.keys if k.startswith("rel:"))
        if names:
            return names[0]
        if rels:
            owner, _, rel = rels[0].partition("/")
            return f"{'the user' if owner == SELF else owner}'s {rel}"
        return "the user" if SELF in self.keys else (self.speaker or "?")


@lru_cache(maxsize=8192)  # a pure function of the text; one memory meets many candidates
def subject_of(text: str) -> Subject:
    """The subject of one statement, from its text alone."""
    speaker = ""
    body = text
    m = _SPEAKER.match(text)
    if m and m[1].split()[0].lower() not in _NOT_SUBJECT_NAMES:
        speaker, body = m[1].lower(), text[m.end():]
    owner = SELF if not speaker else f"name:{speaker}"
    keys = _zh_subject(body, owner) if is_mostly_chinese(body) else _en_subject(body, owner)
    if speaker and SELF in keys:  # "Melanie: I painted …" is about Melanie
        keys = (keys - {SELF}) | {f"name:{speaker}", f"{SELF}@{speaker}"}
    return Subject(frozenset(keys), speaker)


def with_entities(subject: Subject, entities: Iterable[str]) -> Subject:
    """An unclear subject (a pronoun) falls back to the statement's metadata entities."""
    if subject.certain:
        return subject
    names = {f"name:{e.strip().lower()}" for e in entities if e and e.strip()}
    return Subject(frozenset(names), subject.speaker) if names else subject


def relation_of(word: str, modifier: str = "") -> str | None:
    """The relation a word names ("sister", "elder-sister", "best-friend"), or None."""
    if word in _ZH_FINE_RELATIONS:
        return _ZH_FINE_RELATIONS[word]
    low = word.lower()
    rel = lx.EN_RELATIONS.get(low) or _EN_EXTRA_RELATIONS.get(low) or _ZH_RELATIONS.get(word)
    if rel is None:
        return None
    mod = _EN_MODIFIERS.get(modifier.lower(), "")
    return f"{mod}-{rel}" if mod else rel


def _self_or_relation(owner: str, word: str, name: str = "", modifier: str = "") -> set[str]:
    """"my X": a relation of the owner is someone else; any other X (car, job) is the owner's."""
    rel = relation_of(word, modifier)
    if rel is None:
        return {SELF}
    keys = {f"rel:{owner}/{rel}"}
    if name:
        keys.add(f"name:{name.lower()}")
    return keys


# A sentence that opens with a verb in the past tense and goes on to its object or place has
# dropped its "I" ("Cancelled my gym membership", "Moved to Berlin last month"); a name goes
# on to a verb ("Ted moved to Berlin").
_DROPPED_I = re.compile(
    r"(?:[A-Z][a-z]{2,}ed|Got|Quit|Left|Sold|Took|Went|Made|Bought|Began|Gave|Lost|Found|Sent)"
    r"\s+(?:my|our|to|the|a|an|from|up|out|off|back|over|into|in|on|at|for|with|away|it|all|"
    r"rid|promoted|married|engaged|divorced|fired|hired|laid|dumped|accepted|admitted)\b")


def _en_subject(text: str, owner: str) -> set[str]:
    body = text.lstrip(" \"'“‘-—")
    body = _EN_LEAD_FILLER.sub("", body, count=1) if _EN_LEAD_FILLER.match(body) else body
    clause = _EN_LEAD_CLAUSE.match(body)
    if clause and not re.match(rf"\s*{_NAME}\s*,\s+(?:the user|my)\b", body, re.IGNORECASE):
        body = body[clause.end():]  # a leading adverbial: "Every weekend, Anna …"
    if _EN_FIRST_PERSON.match(body):
        return {SELF}
    m = re.match(rf"(?:[Mm]y|[Oo]ur|[Tt]he user'?s|[Tt]he user’s)\s+{_EN_REL}(?:,?\s+({_NAME}))?",
                 body)
    if m:
        return _self_or_relation(owner if body[0] in "MmOo" else SELF, m[2], m[3] or "", m[1] or "")
    if re.match(r"[Tt]he user\b", body):
        return {SELF}
    if _EN_PRONOUN.match(body):
        return set()
    m = re.match(rf"(?:[Tt]he\s+)?({_NAME})", body)
    if not m:
        return set()
    words = [w for w in m[1].split() if w.lower() not in _TITLES]
    if not words or words[0].lower().strip(".") in _NOT_SUBJECT_NAMES or _calendar(words[0]):
        return set()
    if _DROPPED_I.match(body):
        return {owner}  # "Moved to Berlin.", "Switched my phone plan": chat drops the "I"
    name = " ".join(words).lower()
    rest = body[m.end():]
    if name.endswith(("'s", "’s")):
        name = name[:-2]
        rel = re.match(rf"\s+{_EN_REL}", rest)
        relation = relation_of(rel[2], rel[1] or "") if rel else None
        if relation:  # "Anna's sister …" is about the sister
            return {f"rel:name:{name}/{relation}"}
        return {f"name:{name}"}
    keys = {f"name:{name}"}
    apposed = re.match(
        rf",?\s+(is\s+|was\s+)?(?:the user'?s|the user’s|my|our)\s+{_EN_REL}", rest)
    if apposed:
        relation = relation_of(apposed[3], apposed[2] or "")
        who = SELF if "user" in apposed[0] else owner
        if relation:  # "Emma, the user's daughter, …"
            keys.add(f"rel:{who}/{relation}")
        elif apposed[1]:  # "Coffee is my favourite drink": about the user's favourite
            return {SELF}
    return keys


def _calendar(word: str) -> bool:
    w = word.lower().rstrip(".,")
    return w in lx.EN_MONTHS or w.rstrip("s") in lx.EN_WEEKDAYS


def _zh_subject(text: str, owner: str) -> set[str]:
    body = text.strip(" \"'“‘「")
    lead = _ZH_LEAD_TIME.match(body)
    if lead:
        body = body[lead.end():]
    m = re.match(rf"(?:我的|我|用户的|用户)({_ZH_RELS})", body)
    if m:
        who = SELF if body.startswith("用户") else owner
        keys = {f"rel:{who}/{relation_of(m[1])}"}
        name = _zh_name(body[m.end():])
        if name:
            keys.add(f"name:{name}")
        return keys
    if body.startswith(("我", "用户")):
        return {SELF}
    m = re.match(rf"([^，。,\s]{{1,8}}?)(?:，|,|是)(?:用户|我)的({_ZH_RELS})", body)
    if m:
        who = SELF if "用户的" in m[0] else owner
        return {f"rel:{who}/{relation_of(m[2])}", f"name:{m[1].lower()}"}
    if body.startswith(_ZH_PRONOUNS):
        return set()
    latin = re.match(rf"({_NAME})", body)
    name = latin[1].lower() if latin else _zh_name(body)
    if not name:
        return set()
    rest = body[len(name):] if not latin else body[latin.end():]
    rel = re.match(rf"的({_ZH_RELS})", rest)
    if rel:  # "王芳的妹妹…" is about the sister
        return {f"rel:name:{name}/{relation_of(rel[1])}"}
    return {f"name:{name}"}


def _zh_name(text: str) -> str:
    """A leading Chinese person name: 小王 / 老李 / 阿明, or a surname and one or two characters."""
    chars = re.match(f"[{_CJK}]+", text)
    if not chars:
        return ""
    run = chars[0]
    if len(run) >= 2 and run[0] in "小老阿" and run[1] not in _ZH_NAME_STOP:
        return run[:2]
    surname = next((s for s in _ZH_COMPOUND_SURNAMES if run.startswith(s)), "")
    if not surname and run[0] in _ZH_SURNAMES:
        surname = run[0]
    if not surname:
        return ""
    given = ""
    for ch in run[len(surname):len(surname) + 2]:
        if ch in _ZH_NAME_STOP:
            break
        given += ch
    return surname + given if given else ""


# --------------------------------------------------------------------------- comparing


def compare(a: Subject, b: Subject, text_a: str, text_b: str) -> Comparison:
    """``different`` only when both subjects are certain, share no alias and neither is named
    in the other text; ``same`` when they share an alias; ``unknown`` otherwise."""
    if not (a.certain and b.certain):
        return "unknown"
    if any(_alias_match(x, y) for x in a.keys for y in b.keys):
        return "same"
    # Bare "I" against a named speaker's "I" may be the same person: the judge decides.
    if (SELF in a.keys and b.speaker) or (SELF in b.keys and a.speaker):
        return "unknown"
    if _mentions(text_b, a) or _mentions(text_a, b):
        return "unknown"
    return "different"


def different_subjects(
    text_a: str, text_b: str, entities_a: Iterable[str] = (), entities_b: Iterable[str] = (),
) -> str | None:
    """Why two statements are about different subjects, or None if they may not be."""
    a = with_entities(subject_of(text_a), entities_a)
    b = with_entities(subject_of(text_b), entities_b)
    if compare(a, b, text_a, text_b) != "different":
        return None
    return f"different subjects: {a.describe()} vs {b.describe()}"


def _alias_match(x: str, y: str) -> bool:
    if x == y:
        return True
    if x.startswith("rel:") and y.startswith("rel:"):
        # "my sister" may be the elder or the younger one; "elder-" and "younger-" are two.
        (ox, _, rx), (oy, _, ry) = x[4:].rpartition("/"), y[4:].rpartition("/")
        return ox == oy and (_base(rx) == ry or _base(ry) == rx)
    if x.startswith("name:") and y.startswith("name:"):
        # "Anna" and "Anna Kowalski" are one person; "Anna Kowalski" and "Anna Nowak" two.
        tx, ty = x[5:].split(), y[5:].split()
        short, long = (tx, ty) if len(tx) <= len(ty) else (ty, tx)
        return bool(short) and len(short) < len(long) and all(w in long for w in short) \
            and short[0] == long[0]
    return False


def _base(relation: str) -> str:
    kind, _, rest = relation.partition("-")
    return rest if kind in _KINDS and rest else relation


def _mentions(text: str, subject: Subject) -> bool:
    """The other statement names this subject somewhere (not only as its subject)."""
    low = text.lower()
    for key in subject.keys:
        kind, _, value = key.partition(":")
        if kind == "name" and _name_in(value, low):
            return True
        owner, _, relation = value.rpartition("/")
        named_owner = owner.removeprefix("name:") if owner.startswith("name:") else ""
        if kind == "rel" and _relation_in(relation, low, text) and (
                not named_owner or _name_in(named_owner, low)):  # Melanie's kids, not Caroline's
            return True
    return False


def _name_in(name: str, low: str) -> bool:
    if re.search(f"[{_CJK}]", name):
        return name in low
    return re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", low) is not None


def _relation_in(relation: str, low: str, text: str) -> bool:
    """A relation named anywhere in a text: "sister" by any sister word, "elder-sister" only by
    姐姐 or an elder-sister phrase."""
    mod, _, base = relation.partition("-") if relation.partition("-")[0] in _KINDS else (
        "", "", relation)
    zh = [w for w, rel in _ZH_RELATIONS.items()
          if (_ZH_FINE_RELATIONS.get(w) == relation if mod else rel == base)]
    if any(w in text for w in zh):
        return True
    en = {w for w, rel in (*lx.EN_RELATIONS.items(), *_EN_EXTRA_RELATIONS.items())
          if rel == base} | {base}
    mods = [m for m, kind in _EN_MODIFIERS.items() if kind == mod] if mod else [""]
    return any(re.search(rf"\b{re.escape(f'{m} ' if m else '')}{re.escape(w)}s?\b", low)
               for w in en for m in mods)
