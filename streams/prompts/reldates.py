"""Relative dates made absolute ("tomorrow" -> 2025-03-15, "下周三" -> 2025年3月19日).

Used by the rules stand-ins. The reference day is the local date of the message
(its own UTC offset), because "tomorrow" means the speaker's tomorrow.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import date, timedelta

_EN_DAY_PARTS = "morning|afternoon|evening|night"
_EN_PREP = r"(?:(until|till|by|before|after|since|from|for|through)\s+)?"
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_ZH_WEEKDAY = {"一": 0, "二": 1, "三": 2, "四": 3, "五": 4, "六": 5, "日": 6, "天": 6}


def _monday(day: date) -> date:
    return day - timedelta(days=day.weekday())


def _month_shift(day: date, months: int) -> date:
    index = day.year * 12 + day.month - 1 + months
    return date(index // 12, index % 12 + 1, 1)


def resolve_en(text: str, today: date) -> tuple[str, date | None]:
    """Relative English date phrases replaced by ISO dates; the first event date found."""
    found: list[date] = []

    def on(day: date, prep: str | None, phrase: str = "on {d}") -> str:
        found.append(day)
        return f"{prep} {day.isoformat()}" if prep else phrase.format(d=day.isoformat())

    offsets = {
        "the day after tomorrow": 2,
        "the day before yesterday": -2,
        "tomorrow": 1,
        "today": 0,
        "yesterday": -1,
    }
    rules: list[tuple[str, Callable[[re.Match[str]], str]]] = [
        (
            rf"\btomorrow ({_EN_DAY_PARTS})\b",
            lambda m: on(today + timedelta(1), None, f"on the {m[1].lower()} of {{d}}"),
        ),
        (
            rf"\byesterday ({_EN_DAY_PARTS})\b",
            lambda m: on(today - timedelta(1), None, f"on the {m[1].lower()} of {{d}}"),
        ),
        (r"\blast night\b", lambda m: on(today - timedelta(1), None, "on the night of {d}")),
        (r"\btonight\b", lambda m: on(today, None, "on the night of {d}")),
        (
            r"\bthis (morning|afternoon|evening)\b",
            lambda m: on(today, None, f"on the {m[1].lower()} of {{d}}"),
        ),
        (
            _EN_PREP + r"\b(the day after tomorrow|the day before yesterday|tomorrow|today"
            r"|yesterday)\b",
            lambda m: on(today + timedelta(offsets[m[2].lower()]), m[1]),
        ),
        (
            r"\b(next|last|this) week\b",
            lambda m: on(
                _monday(today) + timedelta(weeks={"next": 1, "last": -1, "this": 0}[m[1].lower()]),
                None,
                "in the week of {d}",
            ),
        ),
        (r"\b(next|last) month\b", lambda m: _month(m[1].lower(), today, found)),
        (
            r"\b(next|last|this) (" + "|".join(_WEEKDAYS) + r")\b",
            lambda m: on(_weekday(today, m[1].lower(), _WEEKDAYS.index(m[2].lower())), None),
        ),
        (r"\bin (\d{1,2}) days\b", lambda m: on(today + timedelta(int(m[1])), None)),
        (r"\b(\d{1,2}) days ago\b", lambda m: on(today - timedelta(int(m[1])), None)),
    ]
    for pattern, repl in rules:
        text = re.sub(pattern, repl, text, flags=re.IGNORECASE)
    return text, (found[0] if found else None)


def _month(which: str, today: date, found: list[date]) -> str:
    first = _month_shift(today, 1 if which == "next" else -1)
    found.append(first)
    return f"in {first:%Y-%m}"


def _weekday(today: date, which: str, weekday: int) -> date:
    """``this X`` = X of the current week; ``next X`` / ``last X`` = X of the next / last week."""
    shift = {"this": 0, "next": 1, "last": -1}[which]
    return _monday(today) + timedelta(weeks=shift, days=weekday)


def _zh_date(day: date) -> str:
    return f"{day.year}年{day.month}月{day.day}日"


def resolve_zh(text: str, today: date) -> tuple[str, date | None]:
    """Relative Chinese date words replaced by absolute dates; the first event date found."""
    found: list[date] = []

    def mark(day: date, suffix: str = "") -> str:
        found.append(day)
        return _zh_date(day) + suffix

    day_words = {
        "大后天": 3,
        "后天": 2,
        "明天": 1,
        "明日": 1,
        "今天": 0,
        "今日": 0,
        "昨天": -1,
        "昨日": -1,
        "前天": -2,
        "大前天": -3,
    }
    week_words = {"下": 1, "上": -1, "这": 0, "本": 0}
    rules: list[tuple[str, Callable[[re.Match[str]], str]]] = [
        (r"今晚", lambda m: mark(today, "晚上")),
        (r"昨晚", lambda m: mark(today - timedelta(1), "晚上")),
        (r"明早", lambda m: mark(today + timedelta(1), "早上")),
        (
            r"大后天|大前天|后天|明天|明日|今天|今日|昨天|昨日|前天",
            lambda m: mark(today + timedelta(day_words[m[0]])),
        ),
        (
            r"(下|上|这|本)(?:个)?(?:周|星期|礼拜)([一二三四五六日天])",
            lambda m: mark(
                _monday(today) + timedelta(weeks=week_words[m[1]], days=_ZH_WEEKDAY[m[2]])
            ),
        ),
        (
            r"(下|上|这|本)(?:个)?(?:周|星期|礼拜)",
            lambda m: mark(_monday(today) + timedelta(weeks=week_words[m[1]]), "开始的那一周"),
        ),
        (r"(下|上)个月", lambda m: _zh_month(m[1], today, found)),
        (r"明年", lambda m: f"{today.year + 1}年"),
        (r"去年", lambda m: f"{today.year - 1}年"),
        (r"今年", lambda m: f"{today.year}年"),
    ]
    for pattern, repl in rules:
        text = re.sub(pattern, repl, text)
    return text, (found[0] if found else None)


def _zh_month(which: str, today: date, found: list[date]) -> str:
    first = _month_shift(today, 1 if which == "下" else -1)
    found.append(first)
    return f"{first.year}年{first.month}月"
