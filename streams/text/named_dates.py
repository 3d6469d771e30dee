"""Calendar dates a question names ("on October 13, 2023", "in May 2023", "before 3 June",
"2023年5月3日"), as periods a memory's time can fall in.

Search ranks the turns said in a named period above the rest (``streams.core.turn_ranking``):
"What did Gina find for her store on 1 February, 2023?" is answered by what was said that
day, which the words and the embedding alone do not single out. Only absolute dates are
read here (a question's "yesterday" has no day to resolve against); a date without its year
names that day of every year. A day stands for itself and the day either side (what
happened on a day is often told the day after); "before"/"after" a date, for the 30 days
on that side of it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, timedelta

from memstream.streams.text import lexicon as lx

_MONTH = rf"({'|'.join(lx.EN_MONTHS)}|jan|feb|mar|apr|jun|jul|aug|sept|sep|oct|nov|dec)\.?"
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"(\d{4})"
_BEFORE = r"(before|until|till|by|prior to|after|since)\s+(?:the\s+)?"
# a day either side of a named day; 30 days on the named side of "before"/"after" a date
DAY_SLACK = timedelta(days=1)
SIDE_SPAN = timedelta(days=30)


@dataclass(frozen=True)
class NamedDate:
    """A date as a question names it: ``year`` and ``day`` may be missing (``day`` then
    names the whole month), ``side`` is -1 for "before", 1 for "after", 0 for "on"/"in"."""

    month: int
    year: int | None = None
    day: int | None = None
    side: int = 0

    def holds(self, when: date) -> bool:
        """Whether ``when`` falls in the period this names."""
        year = self.year if self.year is not None else when.year
        if self.day is None:
            if self.side == 0:
                return when.month == self.month and (self.year is None or when.year == year)
            start = date(year, self.month, 1)
            anchor = start if self.side < 0 else _month_end(start)
        else:
            try:
                anchor = date(year, self.month, self.day)
            except ValueError:  # "February 30"
                return False
            if self.side == 0:
                return abs(when - anchor) <= DAY_SLACK
        if self.side < 0:
            return anchor - SIDE_SPAN <= when <= anchor
        return anchor <= when <= anchor + SIDE_SPAN


def _month_end(first: date) -> date:
    return (first.replace(day=28) + timedelta(days=4)).replace(day=1) - timedelta(days=1)


def _month(name: str) -> int:
    low = name.lower().rstrip(".")
    return next(n for full, n in lx.EN_MONTHS.items() if full.startswith(low[:3]))


def _side(word: str | None) -> int:
    if not word:
        return 0
    return -1 if word.lower() in ("before", "until", "till", "by", "prior to") else 1


# English: "October 13, 2023", "13 October 2023", "13th of October", "October 2023",
# "2023-10-13", each optionally after "before"/"after"; most specific first.
# each with the groups of its month, year, day (0: none) and "before"/"after" word
_EN: list[tuple[re.Pattern[str], tuple[int, int, int, int]]] = [
    (re.compile(rf"\b(?:{_BEFORE})?{_MONTH}\s+{_DAY}\b,?(?:\s+{_YEAR}\b)?", re.I),
     (2, 4, 3, 1)),
    (re.compile(rf"\b(?:{_BEFORE})?{_DAY}\s+(?:of\s+)?{_MONTH},?(?:\s+{_YEAR}\b)?", re.I),
     (3, 4, 2, 1)),
    (re.compile(rf"\b(?:{_BEFORE})?{_MONTH},?\s+{_YEAR}\b", re.I), (2, 3, 0, 1)),
]
_ISO = re.compile(rf"\b(?:{_BEFORE})?{_YEAR}[-/](\d{{1,2}})[-/](\d{{1,2}})\b", re.I)
# Chinese: "2023年5月3日", "5月3号", "2023年5月", each optionally followed by 之前/以后…
_ZH = re.compile(r"(?:(\d{4})年)?(\d{1,2})月(?:(\d{1,2})[日号])?(之前|以前|前|之后|以后|后)?")


def named_dates(text: str) -> list[NamedDate]:
    """The calendar dates ``text`` names, in order of appearance (none when it names none).
    "May" and "March" count as months only capitalised (else they are verbs)."""
    found: list[tuple[int, NamedDate]] = []
    taken: list[tuple[int, int]] = []

    def add(start: int, end: int, named: NamedDate) -> None:
        if any(start < e and s < end for s, e in taken):
            return
        taken.append((start, end))
        found.append((start, named))

    for m in _ISO.finditer(text):
        month, day = int(m[3]), int(m[4])
        if 1 <= month <= 12 and 1 <= day <= 31:
            add(m.start(), m.end(), NamedDate(month, int(m[2]), day, _side(m[1])))
    for pattern, (month_at, year_at, day_at, side_at) in _EN:
        for m in pattern.finditer(text):
            name, year, before = m[month_at].rstrip("."), m[year_at], m[side_at]
            if name.lower() in ("may", "march", "mar") and not name[0].isupper():
                continue
            day_n = int(m[day_at]) if day_at else None
            if day_n is not None and not 1 <= day_n <= 31:
                continue
            add(m.start(), m.end(), NamedDate(_month(name), int(year) if year else None,
                                              day_n, _side(before)))
    for m in _ZH.finditer(text):
        month = int(m[2])
        if not 1 <= month <= 12:
            continue
        side = 0 if not m[4] else (-1 if "前" in m[4] else 1)
        add(m.start(), m.end(), NamedDate(month, int(m[1]) if m[1] else None,
                                          int(m[3]) if m[3] else None, side))
    return [named for _, named in sorted(found, key=lambda f: f[0])]
