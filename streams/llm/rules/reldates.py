"""Relative dates found and resolved ("tomorrow" -> 2025-03-15, "下周三" -> 2025-03-19).

Used by the rules stand-ins. Each hit is a span of the text with the resolved
date and a label; callers add the label next to the phrase and never rewrite the
phrase itself, so the user's sentence stays as written. The reference day is the
local date of the message (its own UTC offset): "tomorrow" means the speaker's.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Literal

Precision = Literal["day", "week", "weekend", "month", "year"]


@dataclass(frozen=True)
class DateSpan:
    """A relative date phrase at ``text[start:end]`` and the date it stands for."""

    start: int
    end: int
    day: date  # the day, or the first day of the week / weekend / month / year
    precision: Precision

    def label(self, *, zh: bool = False) -> str:
        match self.precision:
            case "day":
                return self.day.isoformat()
            case "week":
                return f"{self.day.isoformat()}那一周" if zh else f"week of {self.day.isoformat()}"
            case "weekend":
                return f"{self.day.isoformat()}那个周末" if zh else (
                    f"weekend of {self.day.isoformat()}"
                )
            case "month":
                return f"{self.day:%Y-%m}"
            case "year":
                return str(self.day.year)


Resolver = Callable[[re.Match[str]], "tuple[date, Precision] | None"]


def _monday(day: date) -> date:
    return day - timedelta(days=day.weekday())


def _saturday(day: date, weeks: int) -> date:
    return _monday(day) + timedelta(weeks=weeks, days=5)


def _month_shift(day: date, months: int) -> date:
    index = day.year * 12 + day.month - 1 + months
    return date(index // 12, index % 12 + 1, 1)


def _year(day: date, years: int) -> date:
    return date(day.year + years, 1, 1)


def _shift(today: date, unit: str, n: int) -> tuple[date, Precision]:
    """``n`` days / weeks / months / years from ``today`` (negative: ago)."""
    if unit.startswith(("day", "天")):
        return today + timedelta(days=n), "day"
    if unit.startswith(("week", "周", "星期", "礼拜")):
        return _monday(today + timedelta(weeks=n)), "week"
    if unit.startswith(("month", "月")):
        return _month_shift(today, n), "month"
    return _year(today, n), "year"


def _scan(text: str, rules: list[tuple[str, Resolver]], flags: int) -> list[DateSpan]:
    """Every rule's matches, earlier rules winning where phrases overlap; in text order."""
    spans: list[DateSpan] = []
    for pattern, resolve in rules:
        for m in re.finditer(pattern, text, flags):
            if any(m.start() < s.end and s.start < m.end() for s in spans):
                continue
            hit = resolve(m)
            if hit is not None:
                spans.append(DateSpan(m.start(), m.end(), hit[0], hit[1]))
    return sorted(spans, key=lambda s: s.start)


# --------------------------------------------------------------------------- English

_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_EN_NUMBERS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
    "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12,
    "a couple of": 2, "couple of": 2,
}
_EN_COUNT = r"(\d{1,2}|a couple of|couple of|an?|one|two|three|four|five|six|seven|eight" \
    r"|nine|ten|eleven|twelve)"
_EN_UNIT = r"(days?|weeks?|months?|years?)"
_WHICH = {"next": 1, "last": -1, "this": 0, "coming": 1, "past": -1}


def _en_count(raw: str) -> int:
    low = " ".join(raw.lower().split())
    return int(low) if low.isdigit() else _EN_NUMBERS[low]


def find_en(text: str, today: date) -> list[DateSpan]:
    """Relative English date phrases of ``text`` and their dates."""
    offsets = {
        "the day after tomorrow": 2,
        "the day before yesterday": -2,
        "tomorrow": 1,
        "today": 0,
        "tonight": 0,
        "yesterday": -1,
        "last night": -1,
    }

    def day(n: int) -> tuple[date, Precision]:
        return today + timedelta(days=n), "day"

    rules: list[tuple[str, Resolver]] = [
        (
            r"\b(the day after tomorrow|the day before yesterday|tomorrow|yesterday)"
            r"(?: (?:morning|afternoon|evening|night))?\b",
            lambda m: day(offsets[m[1].lower()]),
        ),
        (r"\b(?:last night|tonight|today|this (?:morning|afternoon|evening))\b",
         lambda m: day(offsets.get(m[0].lower(), 0))),
        (r"\bthe week before last\b", lambda m: (_monday(today) - timedelta(weeks=2), "week")),
        (r"\bthe week before(?=\s*(?:[.,;:!?)]|$))", lambda m: (_monday(today) - timedelta(weeks=1),
                                                             "week")),
        (r"\b(next|last|this|past|coming) weekend\b",
         lambda m: (_saturday(today, _WHICH[m[1].lower()]), "weekend")),
        (r"\b(next|last|this|past|coming) week\b",
         lambda m: (_monday(today) + timedelta(weeks=_WHICH[m[1].lower()]), "week")),
        (r"\b(next|last|this|past|coming) month\b",
         lambda m: (_month_shift(today, _WHICH[m[1].lower()]), "month")),
        (r"\b(next|last|this|past|coming) year\b",
         lambda m: (_year(today, _WHICH[m[1].lower()]), "year")),
        (
            r"\b(next|last|this|coming) (" + "|".join(_WEEKDAYS) + r")\b",
            lambda m: (_weekday(today, m[1].lower(), _WEEKDAYS.index(m[2].lower())), "day"),
        ),
        (rf"\b{_EN_COUNT} {_EN_UNIT} ago\b", lambda m: _shift(today, m[2].lower(),
                                                              -_en_count(m[1]))),
        (rf"\bin {_EN_COUNT} {_EN_UNIT}(?: time)?\b", lambda m: _shift(today, m[2].lower(),
                                                                       _en_count(m[1]))),
        # a deadline names the coming weekday ("by Friday": the next Friday, today if it is one)
        (r"\b(?:by|until|till|before) (" + "|".join(_WEEKDAYS) + r")\b",
         lambda m: (_coming(today, _WEEKDAYS.index(m[1].lower())), "day")),
        # a day of a month without its year ("May 14", "14th of May")
        (rf"\b({_MONTH_NAMES})\.? (\d{{1,2}})(?:st|nd|rd|th)?\b(?!,? ?\d{{4}})(?!:)",
         lambda m: _month_day(today, m[1], m[2])),
        (rf"\b(\d{{1,2}})(?:st|nd|rd|th)? (?:of )?({_MONTH_NAMES})\b(?!,? ?\d{{4}})",
         lambda m: _month_day(today, m[2], m[1])),
    ]
    spans = _scan(text, rules, re.IGNORECASE)
    # "yesterday's dinner": the label goes after the possessive, not inside the word.
    return [
        DateSpan(s.start, s.end + 2, s.day, s.precision)
        if text[s.end : s.end + 2] in ("'s", "\u2019s") else s
        for s in spans
    ]


_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august",
           "september", "october", "november", "december")
_MONTH_NAMES = "|".join(_MONTHS) + "|jan|feb|mar|apr|jun|jul|aug|sept|sep|oct|nov|dec"


def _coming(today: date, weekday: int) -> date:
    return today + timedelta(days=(weekday - today.weekday()) % 7)


def _month_day(today: date, month_name: str, day_raw: str) -> tuple[date, Precision] | None:
    """The occurrence of that day nearest the message (a flight "for May 14" booked in April
    is this year's; "on December 30" said on January 2 is last year's)."""
    if month_name in ("may", "march"):
        return None  # the verbs ("I may 2 …"): only the capitalised names are months here
    low = month_name.lower()
    month = next(i for i, name in enumerate(_MONTHS, start=1) if name.startswith(low[:3]))
    candidates = []
    for year in (today.year - 1, today.year, today.year + 1):
        try:
            candidates.append(date(year, month, int(day_raw)))
        except ValueError:
            continue
    if not candidates:
        return None  # "February 30": not a date
    return min(candidates, key=lambda d: (abs((d - today).days), d < today)), "day"


def _weekday(today: date, which: str, weekday: int) -> date:
    """``this X`` = X of the current week; ``next X`` / ``last X`` = X of the next / last week."""
    shift = {"this": 0, "next": 1, "coming": 1, "last": -1}[which]
    return _monday(today) + timedelta(weeks=shift, days=weekday)


# --------------------------------------------------------------------------- Chinese

_ZH_WEEKDAY = {"一": 0, "二": 1, "三": 2, "四": 3, "五": 4, "六": 5, "日": 6, "天": 6}
_ZH_DIGITS = {"一": 1, "两": 2, "二": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8,
              "九": 9, "十": 10}
_ZH_DAYS = {
    "大后天": 3, "后天": 2, "明天": 1, "明日": 1, "明早": 1, "明晚": 1, "今天": 0, "今日": 0,
    "今晚": 0, "今早": 0, "昨天": -1, "昨日": -1, "昨晚": -1, "前天": -2, "大前天": -3,
}
_ZH_WHICH = {"下": 1, "上": -1, "这": 0, "本": 0}
_ZH_YEARS = {"后年": 2, "明年": 1, "今年": 0, "去年": -1, "前年": -2}
_ZH_WEEK = r"(?:周|星期|礼拜)"


def _zh_count(raw: str) -> int | None:
    if raw.isdigit():
        return int(raw)
    if len(raw) == 1:
        return _ZH_DIGITS.get(raw)
    if raw.startswith("十"):
        rest = _ZH_DIGITS.get(raw[1:], 0)
        return 10 + rest
    return None


def _zh_shift(today: date, raw: str, unit: str, direction: str) -> tuple[date, Precision] | None:
    n = _zh_count(raw)
    if n is None:
        return None
    return _shift(today, unit, -n if direction in ("前", "以前", "之前") else n)


def find_zh(text: str, today: date) -> list[DateSpan]:
    """Relative Chinese date words of ``text`` and their dates."""
    days = "|".join(sorted(_ZH_DAYS, key=len, reverse=True))
    rules: list[tuple[str, Resolver]] = [
        (days, lambda m: (today + timedelta(days=_ZH_DAYS[m[0]]), "day")),
        (
            rf"(下|上|这|本)个?{_ZH_WEEK}([一二三四五六日天])",
            lambda m: (_monday(today) + timedelta(weeks=_ZH_WHICH[m[1]],
                                                  days=_ZH_WEEKDAY[m[2]]), "day"),
        ),
        (r"(下|上|这|本)个?周末", lambda m: (_saturday(today, _ZH_WHICH[m[1]]), "weekend")),
        (rf"(下|上|这|本)个?{_ZH_WEEK}",
         lambda m: (_monday(today) + timedelta(weeks=_ZH_WHICH[m[1]]), "week")),
        (r"(下|上|这)个月|本月", lambda m: (_month_shift(today, _ZH_WHICH[m[1] or "本"]), "month")),
        ("|".join(_ZH_YEARS), lambda m: (_year(today, _ZH_YEARS[m[0]]), "year")),
        (
            rf"(\d{{1,2}}|十[一二三四五六七八九]?|[一两二三四五六七八九])个?(天|{_ZH_WEEK}|月|年)"
            r"(以前|之前|前|以后|之后|后)",
            lambda m: _zh_shift(today, m[1], m[2], m[3]),
        ),
    ]
    return _scan(text, rules, 0)
