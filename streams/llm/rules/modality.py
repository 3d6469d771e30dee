"""What kind of claim a statement makes, and when, for the rules relation judge.

A plan ("I plan to move to Berlin") or a trip ("next week I'm in Shanghai on business,
staying near the Bund") does not replace where someone lives or works; two statements
about the same thing at different times ("last week" / "next week") are two events, not
one said twice. Without a model these shallow cues are all the judge has, so it uses
them only to hold back: a pair whose moods or times differ is never merged or contradicted.
"""

from __future__ import annotations

import re
from typing import Literal

Mood = Literal["fact", "plan", "trip"]

_NOT_A_PLAN = r"work|school|bed|sleep|church|class|the|a|an|my|his|her|their"
_EN_PLAN = re.compile(
    r"\b(?:plans?|planning|planned|intends?|intending|wants? to|wanna|hopes?|hoping|"
    r"thinking (?:about|of)|considering|consider|might|maybe|perhaps|would like|"
    rf"will|won't|shall|(?:going to|gonna)(?!\s+(?:{_NOT_A_PLAN})\b)|about to|someday|"
    r"one day|after retiring|dreams? of|wish(?:es)? to|aims? to|tomorrow|next (?:week|month|"
    r"year|weekend|summer|winter|spring|autumn|fall|monday|tuesday|wednesday|thursday|friday|"
    r"saturday|sunday))\b",
    re.IGNORECASE)
_EN_TRIP = re.compile(
    r"\b(?:trip|trips|travel(?:s|led|ed|ling|ing)?|visit(?:s|ed|ing)?|flying|fly|flies|flew|"
    r"flight|conference|holiday|holidays|vacation|staying (?:at|in|near)|stay(?:s|ed)? at|"
    r"hotel|tour|touring|business trip|on business|spend(?:s|ing)? the (?:weekend|holidays?|"
    r"summer|week))\b", re.IGNORECASE)
_ZH_PLAN = ("打算", "计划", "准备", "想要", "想去", "想申请", "想买", "想搬", "想学", "想换",
            "想做", "希望", "考虑",
            "将要", "将会", "将来", "明天", "后天", "下周", "下个月", "下月", "明年",
            "下星期", "下礼拜", "要去")
# 以后 opening a clause is "from now on, later" (以后我想当老师); after a deed it is "after"
# (分手以后, 搬到苏州以后): what follows has happened.
_ZH_LATER = re.compile(r"(?:^|[，,。；;！!？?\s]|我们?|你们?)以后")
_ZH_TRIP = ("出差", "旅游", "旅行", "度假", "飞去", "飞往", "开会", "参观", "游玩", "探亲",
            "酒店", "住几天", "玩几天")

# Relative times, each folded to one word; two statements naming different ones are about
# different occasions. Absolute dates are the analysis' values.
_EN_WHEN = re.compile(
    r"\b(?:(last|next|this|coming)\s+(week|month|year|weekend|summer|winter|spring|autumn|"
    r"fall)|(yesterday|today|tonight|tomorrow))\b", re.IGNORECASE)
_ZH_WHEN = {
    "前天": "day-2", "昨天": "day-1", "今天": "day0", "今晚": "day0", "明天": "day+1",
    "后天": "day+2", "上周": "week-1", "上星期": "week-1", "上礼拜": "week-1", "这周": "week0",
    "本周": "week0", "这星期": "week0", "下周": "week+1", "下星期": "week+1", "下礼拜": "week+1",
    "上个月": "month-1", "上月": "month-1", "这个月": "month0", "本月": "month0",
    "下个月": "month+1", "下月": "month+1", "去年": "year-1", "今年": "year0", "明年": "year+1",
    "这周末": "weekend0", "上周末": "weekend-1", "下周末": "weekend+1",
}
_ZH_AGE = re.compile(r"今年(?=[\d零一二两三四五六七八九十]+岁)")
_EN_OFFSET = {"last": "-1", "this": "0", "next": "+1", "coming": "+1"}
_EN_DAY = {"yesterday": "day-1", "today": "day0", "tonight": "day0", "tomorrow": "day+1"}


def mood(text: str) -> Mood:
    """``trip`` (travel, a visit, a stay away), ``plan`` (intended or future), else ``fact``."""
    if _EN_TRIP.search(text) or any(w in text for w in _ZH_TRIP):
        return "trip"
    if _EN_PLAN.search(text) or any(w in text for w in _ZH_PLAN) or _ZH_LATER.search(text):
        return "plan"
    return "fact"


def when(text: str) -> frozenset[str]:
    """The relative times a statement names, folded ("next week", 下周 → ``week+1``)."""
    found: set[str] = set()
    for m in _EN_WHEN.finditer(text):
        if m[3]:
            found.add(_EN_DAY[m[3].lower()])
        else:
            found.add(f"{m[2].lower().replace('autumn', 'fall')}{_EN_OFFSET[m[1].lower()]}")
    text = _ZH_AGE.sub("", text)  # 今年六岁 is an age, not an occasion
    for word in sorted(_ZH_WHEN, key=len, reverse=True):
        if word in text:
            found.add(_ZH_WHEN[word])
            text = text.replace(word, " ")
    return frozenset(found)


def held_back(old: str, new: str, opposite: bool = False) -> str | None:
    """Why the rules judge must call this pair independent whatever else they share, or None:
    a plan or trip next to a settled fact (unless one negates the other, ``opposite``:
    "decided not to move" ends a plan), or different relative times."""
    mood_old, mood_new = mood(old), mood(new)
    if mood_old != mood_new and not opposite:
        return f"a {_name(mood_new)} next to a {_name(mood_old)}: one does not replace the other"
    when_old, when_new = when(old), when(new)
    if when_old and when_new and when_old != when_new:
        return "different times: two occasions, not one said twice"
    return None


def _name(m: Mood) -> str:
    return {"fact": "settled fact", "plan": "plan", "trip": "trip"}[m]
