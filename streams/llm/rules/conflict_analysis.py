"""Turns one memory statement into the features the deterministic relation judge compares.

English and Chinese. The features are deliberately shallow — who the statement is
about, its content words, typed values (numbers, dates, times, weekdays), names and
places, the attribute it sets, its polarity and whether it reports a change — so
each rule in ``streams.llm.rules.conflict`` is a short comparison of two ``Statement``s.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Literal

from memstream.streams.text import lexicon as lx
from memstream.streams.text.words import is_mostly_chinese

Value = tuple[str, str]  # (kind, normalised value), e.g. ("date", "2024-06-12"), ("num:cat", "2")
MakeValue = Callable[[re.Match[str]], Value | None]

_CJK = r"\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_CJK_CHAR = re.compile(f"[{_CJK}]")
_LATIN = re.compile(r"[A-Za-z][A-Za-z0-9'-]*")
_MONTH = "|".join(sorted(lx.EN_MONTHS, key=len, reverse=True))
_ZH_NUM = "[零一二两三四五六七八九十百千万]+"


@dataclass(frozen=True)
class Statement:
    """The comparable features of one memory statement."""

    text: str
    lang: Literal["en", "zh"]
    subject: frozenset[str]  # "user", "rel:sister", "name:mei"
    content: frozenset[str]  # stems (English) / characters (Chinese); no values or cue words
    values: frozenset[Value]
    entities: frozenset[str]  # names, places, organisations (lower case)
    frames: frozenset[str]  # attributes it sets: "residence", "work", "favorite:color", …
    negative: bool
    change: bool
    diet: str | None
    marital: str | None

    def value_kinds(self) -> dict[str, frozenset[str]]:
        kinds: dict[str, set[str]] = {}
        for kind, value in self.values:
            kinds.setdefault(kind, set()).add(value)
        return {k: frozenset(v) for k, v in kinds.items()}


@lru_cache(maxsize=4096)  # a pure function of the text; the same memory meets many others
def analyse(text: str) -> Statement:
    """Features of a statement; Chinese when CJK characters dominate, English otherwise."""
    return _analyse_zh(text) if is_mostly_chinese(text) else _analyse_en(text)


# --------------------------------------------------------------------------- English


def stem(word: str) -> str:
    """A crude suffix stripper: enough for "lives/living/lived" to meet, not linguistics."""
    w = word.lower()
    if len(w) <= 3:
        return w
    if w.endswith(("ies", "ied")) and len(w) > 4:
        w = w[:-3] + "i"
    elif w.endswith("ing") and len(w) > 5:
        w = w[:-3]
    elif w.endswith("ed") and len(w) > 4 or w.endswith(("sses", "ches", "shes", "xes", "zes")):
        w = w[:-2]
    elif w.endswith("s") and not w.endswith("ss"):
        w = w[:-1]
    if w.endswith("e") and len(w) > 3:
        w = w[:-1]
    if len(w) > 3 and w[-1] == w[-2] and w[-1] not in "ls":
        w = w[:-1]
    if w.endswith("y") and len(w) > 3:
        w = w[:-1] + "i"
    return w


@dataclass(frozen=True)
class _EnLexicon:
    synonyms: dict[str, str]
    frames: tuple[tuple[str, frozenset[str]], ...]
    function: frozenset[str]
    change: frozenset[str]
    marital: dict[str, str]


@cache
def _en_lexicon() -> _EnLexicon:
    """Stemmed views of the English word lists (built on first use, not at import)."""
    return _EnLexicon(
        synonyms={stem(k): stem(v) for k, v in lx.EN_SYNONYMS.items()},
        frames=tuple((name, frozenset(stem(w) for w in en)) for name, en, _ in lx.SLOT_FRAMES),
        function=frozenset(stem(w) for w in lx.EN_FUNCTION) | lx.EN_FUNCTION,
        change=frozenset(stem(w) for w in lx.EN_CHANGE_WORDS),
        marital={stem(k): v for k, v in lx.MARITAL_VALUES.items() if k.isascii()},
    )


def canon(word: str) -> str:
    """Stem plus synonym folding: the token two rewordings should share."""
    s = stem(word)
    return _en_lexicon().synonyms.get(s, s)


def _take(text: str, pattern: str, make: MakeValue, values: set[Value], flags: int = 0) -> str:
    """Collects the values ``pattern`` finds and blanks them out of the text."""

    def repl(m: re.Match[str]) -> str:
        made = make(m)
        if made is None:
            return m.group(0)
        values.add(made)
        return " "

    return re.sub(pattern, repl, text, flags=flags)


def _en_values(text: str) -> tuple[set[Value], str]:
    """Dates, times, weekdays and counted quantities; returns them and the text without them."""
    values: set[Value] = set()
    numbers = "|".join(w for w in lx.EN_NUMBER_WORDS if w not in ("a", "an"))
    rules: list[tuple[str, MakeValue]] = [
        (r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b", lambda m: ("date", _ymd(m[1], m[2], m[3]))),
        (rf"\b({_MONTH})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+(\d{{4}})\b",
         lambda m: ("date", _ymd(m[3], lx.EN_MONTHS[m[1].lower()], m[2]))),
        (rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+({_MONTH})\.?,?\s+(\d{{4}})\b",
         lambda m: ("date", _ymd(m[3], lx.EN_MONTHS[m[2].lower()], m[1]))),
        (rf"\b({_MONTH})\.?\s+(?:of\s+)?(\d{{4}})\b",
         lambda m: ("month", f"{m[2]}-{lx.EN_MONTHS[m[1].lower()]:02d}")),
        (rf"\b({_MONTH})\s+(\d{{1,2}})(?:st|nd|rd|th)?\b",
         lambda m: ("day", f"{lx.EN_MONTHS[m[1].lower()]:02d}-{int(m[2]):02d}")),
        (r"\b(\d{1,2})(?::(\d{2}))?\s*([ap])\.?m\b\.?", _clock),
        (r"\b(\d{1,2}):(\d{2})\b", lambda m: ("time", f"{int(m[1]):02d}:{m[2]}")),
        (r"\b((?:19|20)\d{2})\b", lambda m: ("year", m[1])),
        (r"\b(" + "|".join(lx.EN_WEEKDAYS) + r")s?\b",
         lambda m: ("weekday", lx.EN_WEEKDAYS[m[1].lower()])),
        (rf"\b(\d+(?:[.,]\d+)*|{numbers})\b(?=((?:\s+[a-z]+){{0,3}}))", _quantity),
    ]
    for pattern, make in rules:
        text = _take(text, pattern, make, values, re.IGNORECASE)
    return values, text


def _ymd(year: str | int, month: str | int, day: str | int) -> str:
    return f"{int(year):04d}-{int(month):02d}-{int(day):02d}"


def _clock(m: re.Match[str]) -> Value:
    hour = int(m[1]) % 12 + (12 if m[3].lower() == "p" else 0)
    return ("time", f"{hour:02d}:{m[2] or '00'}")


def _quantity(m: re.Match[str]) -> Value:
    """A number and what it counts: the first content word after it ("two cups of tea" → cup)."""
    raw = m[1].lower().replace(",", "")
    number = lx.EN_NUMBER_WORDS.get(raw)
    amount = str(number) if number is not None else raw
    unit = next((canon(w) for w in m[2].split() if w.lower() not in lx.EN_FUNCTION), "")
    return (f"num:{unit}", amount)


def _en_subject(text: str) -> frozenset[str]:
    """The person the statement is about: the user, a relation of the user, or a name."""
    rel = r"[Tt]he user'?s\s+([a-z-]+)"
    m = re.match(rf"\s*([A-Z][\w-]*(?:\s+[A-Z][\w-]*)*),\s+{rel}", text)
    if m and m[2].lower() in lx.EN_RELATIONS:
        return frozenset({f"rel:{lx.EN_RELATIONS[m[2].lower()]}", f"name:{m[1].lower()}"})
    m = re.match(r"\s*([A-Z][\w-]*(?:\s+[A-Z][\w-]*)*)\b", text)
    if m and m[1].split()[0].lower() not in lx.EN_NOT_NAMES and not _is_calendar_word(m[1]):
        found = {f"name:{m[1].lower()}"}
        after = re.match(rf"\s+(?:is|was)\s+{rel}", text[m.end():])
        if after and after[1].lower() in lx.EN_RELATIONS:
            found.add(f"rel:{lx.EN_RELATIONS[after[1].lower()]}")
        return frozenset(found)
    m = re.search(r"\b[Tt]he user(?:'?s\s+([a-z-]+)(?:\s+([A-Z][\w-]*))?)?", text)
    if m and m[1] and m[1].lower() in lx.EN_RELATIONS:
        found = {f"rel:{lx.EN_RELATIONS[m[1].lower()]}"}
        if m[2]:
            found.add(f"name:{m[2].lower()}")
        return frozenset(found)
    return frozenset({"user"})


def _is_calendar_word(phrase: str) -> bool:
    first = phrase.split()[0].lower()
    return first in lx.EN_MONTHS or first.rstrip("s") in lx.EN_WEEKDAYS


def _en_entities(text: str) -> set[str]:
    """Capitalised names (not sentence-initial function words) and camel-case brands (iPhone)."""
    out: set[str] = set()
    for i, m in enumerate(re.finditer(r"\b(?:[A-Z][\w-]*|[a-z]+[A-Z][\w-]*)", text)):
        word = m.group(0).removesuffix("'s").lower()
        if (i == 0 and m.start() < 2 and word in lx.EN_NOT_NAMES) or _is_calendar_word(word):
            continue
        if word not in lx.EN_NOT_NAMES:
            out.add(word)
    return out


def _analyse_en(text: str) -> Statement:
    lex = _en_lexicon()
    values, rest = _en_values(text)
    low = re.sub(r"n't\b", " not", rest.replace("\u2019", "'").lower())
    for phrase, replacement in lx.EN_PHRASE_SYNONYMS:
        low = low.replace(phrase, replacement)
    words = re.findall(r"[a-z][a-z0-9-]*", low.replace("'s ", " "))
    stems = [canon(w) for w in words]
    negative = any(w in lx.EN_NEGATIONS or w in lx.EN_NEGATIVE_VERBS for w in words) or _has_phrase(
        low, lx.EN_NEGATION_PHRASES
    )
    change = any(stem(w) in lex.change for w in words) or _has_phrase(low, lx.EN_CHANGE_PHRASES)
    frames = {name for name, triggers in lex.frames if triggers.intersection(stems)}
    frames |= {f"favorite:{canon(m[1])}" for m in re.finditer(r"favou?rite\s+([a-z]+)", low)}
    entities = _en_entities(rest)
    triggers = set().union(*(t for name, t in lex.frames if name in frames))
    content = {
        s for w, s in zip(words, stems, strict=True)
        if w not in lex.function and s not in lex.function and w not in lx.EN_NEGATIONS
        and stem(w) not in lex.change and s not in triggers and len(s) > 1
    }
    marital = next((lex.marital[s] for s in stems if s in lex.marital), None)
    return Statement(
        text=text, lang="en", subject=_en_subject(text), content=frozenset(content),
        values=frozenset(values), entities=frozenset(entities), frames=frozenset(frames),
        negative=negative, change=change, diet=_diet(low, negative), marital=marital,
    )


def _has_phrase(low: str, phrases: Iterable[str]) -> bool:
    return any(re.search(rf"\b{re.escape(p)}\b", low) for p in phrases)


def _diet(low: str, negative: bool) -> str | None:
    """"vegetarian" or "meat"; "does not eat meat" is vegetarian, "no longer vegan" eats meat."""
    if any(w in low for w in lx.DIET_VEG):
        return "meat" if negative else "vegetarian"
    if re.search(lx.DIET_MEAT, low):
        return "vegetarian" if negative else "meat"
    return None


# --------------------------------------------------------------------------- Chinese


def zh_number(raw: str) -> int | None:
    """Arabic or Chinese numerals up to the ten-thousands (两千五百 → 2500)."""
    if raw.isdigit():
        return int(raw)
    total, section, digit = 0, 0, None
    for ch in raw:
        if ch in lx.ZH_DIGITS:
            digit = lx.ZH_DIGITS[ch]
        elif ch in "十百千":
            section += (digit if digit is not None else 1) * {"十": 10, "百": 100, "千": 1000}[ch]
            digit = None
        elif ch == "万":
            total += (section + (digit or 0)) * 10000
            section, digit = 0, None
        else:
            return None
    return total + section + (digit or 0)


def _zh_values(text: str) -> tuple[set[Value], str]:
    values: set[Value] = set()
    rules: list[tuple[str, MakeValue]] = [
        (r"(\d{4})年(\d{1,2})月(\d{1,2})[日号]", lambda m: ("date", _ymd(m[1], m[2], m[3]))),
        (r"(\d{4})年(\d{1,2})月", lambda m: ("month", f"{m[1]}-{int(m[2]):02d}")),
        (r"(\d{1,2})月(\d{1,2})[日号]", lambda m: ("day", f"{int(m[1]):02d}-{int(m[2]):02d}")),
        (r"(\d{4})年", lambda m: ("year", m[1])),
        (r"(\d{1,2})[:：](\d{2})", lambda m: ("time", f"{int(m[1]):02d}:{m[2]}")),
        (r"(?:周|星期|礼拜)([一二三四五六日天])", lambda m: ("weekday", lx.ZH_WEEKDAYS[m[1]])),
        (rf"(\d+(?:\.\d+)?|{_ZH_NUM})\s*([{lx.ZH_MEASURE}])", lambda m: _zh_quantity(m[1], m[2])),
        (r"(\d+(?:\.\d+)?)", lambda m: ("num:", m[1])),
    ]
    for pattern, make in rules:
        text = _take(text, pattern, make, values)
    return values, text


def _zh_quantity(raw: str, unit: str) -> Value | None:
    number = zh_number(raw)
    return None if number is None else (f"num:{unit}", str(number))


def _zh_subject(text: str) -> frozenset[str]:
    rels = "|".join(sorted(lx.ZH_RELATIONS, key=len, reverse=True))
    m = re.match(rf"\s*用户的({rels})", text)
    if m:
        return frozenset({f"rel:{lx.ZH_RELATIONS[m[1]]}"})
    m = re.match(rf"\s*([^，。,\s]{{1,8}}?)(?:，|,|是)用户的({rels})", text)
    if m:
        return frozenset({f"rel:{lx.ZH_RELATIONS[m[2]]}", f"name:{m[1]}"})
    if "用户" in text or "user" in text.lower():
        return frozenset({"user"})
    lead = _CJK_CHAR.findall(text)[:2]
    return frozenset({f"name:{''.join(lead)}"}) if lead else frozenset({"user"})


def _zh_places(text: str) -> set[str]:
    """Names after place/organisation markers (住在X, 搬到X, 在X工作, 换成X) plus Latin words."""
    for noise in lx.ZH_MARKER_NOISE:
        text = text.replace(noise, " ")
    out = {w.lower() for w in _LATIN.findall(text)}
    markers = "|".join(sorted(lx.ZH_PLACE_MARKERS, key=len, reverse=True))
    for m in re.finditer(rf"(?:{markers})([{_CJK}]{{2,10}})", text):
        name = m[1]
        ends = (name.find(end) for end in lx.ZH_PLACE_ENDS)
        cut = min((i for i in ends if i >= 0), default=len(name))
        if cut >= 2:
            out.add(name[:cut])
    return out


def _analyse_zh(text: str) -> Statement:
    norm = text
    for pattern, repl in lx.ZH_SYNONYMS:
        norm = re.sub(pattern, repl, norm)
    values, rest = _zh_values(norm)
    plain = rest
    for word in lx.ZH_NOT_NEGATIONS:
        plain = plain.replace(word, " ")
    negative = any(w in plain for w in lx.ZH_NEGATIONS)
    change = any(w in plain for w in lx.ZH_CHANGE)
    low = norm.lower()
    frames = {name for name, en, zh in lx.SLOT_FRAMES
              if any(w in low for w in zh) or any(w in low.split() for w in en)}
    frames |= {f"favorite:{m[1]}" for m in re.finditer(rf"最喜欢的([{_CJK}]{{2}})", plain)}
    stripped = plain.replace("用户", " ")
    cues = (*lx.ZH_NEGATIONS, *lx.ZH_CHANGE, *lx.ZH_NOT_NEGATIONS, *lx.ZH_FILLERS,
            *(w for name, _, zh in lx.SLOT_FRAMES if name in frames for w in zh))
    for cue in sorted(cues, key=len, reverse=True):
        stripped = stripped.replace(cue, " ")
    content = {ch for ch in _CJK_CHAR.findall(stripped) if ch not in lx.ZH_STOP_CHARS}
    content |= {canon(w) for w in _LATIN.findall(stripped)}
    marital = next((v for k, v in lx.MARITAL_VALUES.items() if not k.isascii() and k in plain),
                   None)
    return Statement(
        text=text, lang="zh", subject=_zh_subject(norm), content=frozenset(content),
        values=frozenset(values), entities=frozenset(_zh_places(rest)), frames=frozenset(frames),
        negative=negative, change=change, diet=_diet(plain, negative), marital=marital,
    )
