"""Words by which a statement says that something changed, and whether it states at all.

Shared by the add stage (a statement that reports a change looks further back for what it
may end: ``MemorySettings.change_threshold``) and the rules stand-in that decides whether it
does (``streams.llm.rules.supersession``). Lexical cues only: a model judges without them.
"""

from __future__ import annotations

import re
from datetime import timedelta

from memstream.streams.text.words import words_of

# A statement about an earlier time than the one it would end does not end it; a relative
# date is resolved to its month at worst ("last month": the 1st), so "earlier" means more
# than a month before.
SLACK = timedelta(days=31)

# An explicit change of state in English: a move, an ending, a switch, a state that no
# longer holds. ("now" alone is not one: "I'm in Berlin now" may be a trip.)
_EN_CHANGE = re.compile(
    r"\b(?:moved|relocated|transferred|no longer|(?:any|no) ?more|quit|quitting|resigned|"
    r"retired|stopped|gave up|given up|handed in (?:my|her|his|our) notice|cancell?ed|"
    r"left (?:my|the|\w+ (?:job|school|team|club|gym|company))|left\b(?= [A-Z])|"
    r"switched|(?:has|have|had) changed|changed (?:my|to|jobs?|teams?|schools?)|"
    r"sold (?:my|the|our|it)|got rid of|broke up|split up|divorced|separated|got married|"
    r"used to|these days|from now on|now (?:live|work|use|drive|have|own|eat|am|study|go|bike|"
    r"ride|walk|commute|support|bank|"
    r"play|take|prefer|like)|instead|replaced|traded (?:in )?(?:my|the)|again now|"
    r"started (?:eating|smoking|drinking|working|living|biking|cycling|driving|taking|riding|"
    r"walking|commuting|using|going to)|(?:is|was) (?:sold|gone)|"
    r"went (?:fully )?(?:vegan|vegetarian|blonde|bald|grey|gray|keto|sober|freelance)|"
    r"passed away|died|as of|nowadays|any longer|"
    r"non-?smoker|ex-?(?:smoker|girlfriend|boyfriend|wife|husband|partner)|my ex\b|"
    r"(?-i:joined (?=[A-Z]|(?:a|the) new\b))|"
    r"got (?:hired|laid off|fired|let go|a new|an? (?:job|offer)|back together)|"
    r"(?:was|been|got) laid off|accepted (?:an|the|a) (?:offer|job|position)|"
    r"started working for|graduated|enrolled|rehomed|shaved (?:my|it)|"
    r"(?:bought|got) (?:a|an|my) (?:new|used|second-hand)|upgraded (?:to|my)|ported my|"
    r"closed (?:my|our) (?:\w+ )?accounts?|(?:i'm|i am|we're|we are) now\b|"
    r"(?:i've|i have|i) (?:become|became)|cut out|smoke-free|single again|we split|"
    r"(?:i'm|i am|we're|we are) engaged|my fianc[eé]e?|ever since|"
    r"put (?:\w+ )?down|(?:haven't|hasn't|have not|has not) \w+ (?:\w+ ){0,3}since|"
    r"selling (?:my|the|our)|transferring|dropped out|got engaged|"
    r"(?:dyed|bleached) (?:my|it)|(?:cut|chopped) (?:off )?(?:all )?my hair|"
    r"(?:day|week|month) \d+ (?:without|sober|smoke-free)|"
    r"\d+ (?:days?|weeks?|months?|years?) (?:without|sober|smoke-free|clean)|"
    r"(?:been|stayed|staying|i'm|i am) sober|now that (?:i'm|i am|i've|i have|we're|we've)|"
    r"(?:my|a) new (?:job|position|role|employer|company|place|apartment|flat|house|home|"
    r"school|university|college|gym|boyfriend|girlfriend|partner|husband|wife|phone|car|bank|"
    r"doctor|dentist|therapist|team|laptop|carrier|provider)|"
    r"started (?:a new job|my new job|working at|at)|"
    r"(?:got|been|was|just) promoted|promoted (?:me )?to|ditched|kicked the habit|"
    r"dropped (?:my|the|our)|swapped (?:my|the|our|out)|"
    r"now(?=\s*(?:[,.!;:)]|[-–—]|$)))\b",
    re.IGNORECASE)
_ZH_CHANGE = tuple(words_of("""
    搬到 搬去 搬回 搬家 已经不 不再 再也不 换成 换了 换到 改成 改为 改学 改坐 改喝 改去 改用
    辞职 离职 辞掉 跳槽 戒了 戒掉 卖了 卖掉 分手 离婚 退休 退出 转学 转到 转行 变成 现在 如今
    已经没 去世 走了 没续 没再 入职 新公司 新工作 新单位 新东家 结婚了 婚后 领证 染回 染成 染了
    剪了短发 剪短 剪了头发 退掉 转去 剪成 戒烟 戒酒 戒糖 戒咖啡 戒奶茶 升职 升为 被裁 裁员了 改行
    换工作 送人了 送走了
"""))
# "Now" that looks back rather than says what holds: 到现在 (until now), 现在想想/现在看来/现在回想
# (in hindsight). Matched at the 现在 (and one character before it, for 到).
_ZH_NOT_A_CHANGE = re.compile(r"(?<=到)现在|现在(?:想想|想来|想起|看来|回想|回头|想一想)")
# 不/没 … 了 with at most six characters between: 不抽烟了, 不吃肉了, 没养狗了; and a pet given
# away (送给表妹养了)
_ZH_NOT_ANY_MORE = re.compile(r"[不没][^，。,.!?！？]{1,6}了|送给[^，。,.!?！？]{1,4}养")

# A statement that supposes, asks or wishes rather than states.
_EN_UNREAL = re.compile(
    r"\b(?:if|would|could|should|suppose|supposing|imagine|wonder|whether|unless|maybe|"
    r"perhaps|might|in case|hypothetically|let'?s say|say (?:I|we))\b|\?", re.IGNORECASE)
_ZH_UNREAL = ("如果", "假如", "要是", "万一", "假设", "的话", "也许", "或许", "可能", "吗", "？")
_CLAUSE_END = re.compile(r"[,，;；。!！?？:：]|\s[-–—]\s|\bbut\b|\bso\b", re.IGNORECASE)
# Moves name a home: a move ends where one lives, not where one works.
_MOVE = re.compile(r"\b(?:moved|relocated)\b|搬", re.IGNORECASE)
# ... unless it moves within the home (我搬到次卧去睡了)
_ZH_ROOM_MOVE = re.compile(r"搬(?:到|去|进|回)了?(?:次卧|主卧|客厅|书房|卧室|阳台|"
                           r"小房间|大房间|隔壁房间|楼上|楼下)")
# A statement that already denies what a cessation would end ("I don't smoke", "我不抽烟"):
# "I quit years ago" agrees with it.
_EN_DENIES = re.compile(r"^(?:i|we)\s+(?:don't|do not|never|no longer|am not|'m not|'ve never|"
                        r"have never)\b|^i'm not\b", re.IGNORECASE)
_ZH_DENIES = re.compile(r"^我?(?:也|从来|一直|从)?[不没]"
                        r"(?!错|过|少|同|一样|到|久|止|仅|但|然|管|论|知道)")
# The words of change that end something without naming what replaces it.
_EN_CEASE = re.compile(r"no longer|(?:any|no) ?more|quit|stopped|gave up|given up|any longer|"
                       r"non-?smoker|kicked the habit|ditched|sober|without", re.IGNORECASE)
_ZH_CEASE = re.compile(r"戒|不再|已经不|再也不|已经没|[不没].*了")


def change_marker(text: str) -> str | None:
    """The words by which ``text`` says something changed, or None."""
    if m := _EN_CHANGE.search(text):
        return m[0]
    for word in _ZH_CHANGE:
        if word in text and any(not _ZH_NOT_A_CHANGE.match(text, m.start())
                                for m in re.finditer(re.escape(word), text)):
            return word
    if m := _ZH_NOT_ANY_MORE.search(text):
        return m[0]
    return None


def marker_clause(text: str, marker: str) -> tuple[str, str]:
    """The clause of ``text`` that holds ``marker``, and the text up to its end (the whole
    text for both when it cannot tell)."""
    at = text.find(marker)
    if at < 0:
        return text, text
    start = max((m.end() for m in _CLAUSE_END.finditer(text, 0, at)), default=0)
    end = next((m.start() for m in _CLAUSE_END.finditer(text, at + len(marker))), len(text))
    return text[start:end], text[:end]


def unreal(text: str) -> bool:
    """A supposition, question or wish (not a statement of what is)."""
    return bool(_EN_UNREAL.search(text)) or any(w in text for w in _ZH_UNREAL)


def is_move(marker: str) -> bool:
    return bool(_MOVE.search(marker))


def moves_within_home(clause: str) -> bool:
    """A move from one room to another (我搬到次卧去睡了): the home stays."""
    return bool(_ZH_ROOM_MOVE.search(clause))


def already_denied(existing: str, marker: str) -> bool:
    """Whether ``existing`` already denies what the cessation ``marker`` says stopped: "I don't
    smoke" and then "I quit in college" agree; nothing ended."""
    ceases = _EN_CEASE.search(marker) or _ZH_CEASE.search(marker)
    text = existing.strip()
    return bool(ceases) and bool(_EN_DENIES.match(text) or _ZH_DENIES.match(text))
