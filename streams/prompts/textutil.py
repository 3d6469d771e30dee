"""Small, dependency-free text helpers for the deterministic ``rules`` stand-ins.

English and Chinese only, by design: enough to split, filter and tag user
statements sensibly without a model; not a linguistic toolkit.
"""

from __future__ import annotations

import re

_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_LATIN_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*")
_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+|(?<=[。！？；;…])|\n+")

def words_of(text: str) -> list[str]:
    return text.split()


EN_STOPWORDS = frozenset(
    words_of(
    """
    a about above after again against all also am an and any are aren't as at be because been
    before being below between both but by can can't cannot could couldn't did didn't do does
    doesn't doing don't down during each few for from further had hadn't has hasn't have haven't
    having he he'd he'll he's her here here's hers herself him himself his how how's i i'd i'll
    i'm i've if in into is isn't it it's its itself just let's me more most mustn't my myself no
    nor not of off on once only or other ought our ours ourselves out over own same shan't she
    she'd she'll she's should shouldn't so some such than that that's the their theirs them
    themselves then there there's these they they'd they'll they're they've this those through
    to too under until up very was wasn't we we'd we'll we're we've were weren't what what's when
    when's where where's which while who who's whom why why's will with won't would wouldn't you
    you'd you'll you're you've your yours yourself yourselves user user's assistant assistant's
    others really actually maybe just quite pretty lot lots thing things something anything
    get gets got getting go goes going went gone make makes made want wants wanted like likes
    liked love loves loved enjoy enjoys enjoyed prefer prefers preferred hate hates hated
    usually always never often sometimes rarely generally tend tends think thinks thought
    feel feels felt know knows knew need needs needed today tomorrow yesterday tonight week
    weeks month months year years day days morning afternoon evening night next last ago
    mine yeah yes okay ok oh well um uh kind sort bit little much many every still even
    one two three four five six seven eight nine ten say says said tell tells told ask asks
    asked
    """
    )
)

ZH_STOP_TERMS: tuple[str, ...] = tuple(
    sorted(
        words_of(
        """
        用户 同伴 助手 及其 不喜欢 喜欢 讨厌 习惯 经常 总是 非常 特别 真的 比较 一直 觉得 认为
        因为 所以 但是 可是 而且 然后 如果 已经 正在 打算 计划 准备 应该 可以 需要 想要 一个
        一些 这个 那个 什么 怎么 时候 现在 那一周 晚上 早上 上午 下午 中午 平时 通常 一般 每天
        我们 他们 她们 自己 其实 还是 或者 以后 之前 之后 一下 有点 一点 开始 的 了 是 在 和 与
        跟 也 都 就 很 要 会 去 到 把 被 对 给 让 着 过 吗 呢 吧 啊 呀 还 又 再 才 最 太 更 不
        没 有 这 那 他 她 它 我 你 您 其 个 些 年 月 日 号 周 爱 从 说 想 得 地 哦 嗯
        """
        ),
        key=len,
        reverse=True,
    )
)

# Multi-character terms kept whole as tags (they contain characters the stop list removes).
ZH_KEYWORDS: tuple[str, ...] = (
    "生日", "会议", "开会", "周末", "日本", "日语", "日记", "过敏", "花生", "海鲜", "素食",
    "吃素", "咖啡", "喝茶", "绿茶", "红茶", "奶茶", "牛奶", "旅行", "旅游", "出差", "运动",
    "跑步", "健身", "游泳", "爬山", "徒步", "篮球", "足球", "音乐", "电影", "读书", "阅读",
    "编程", "工作", "公司", "面试", "考试", "学习", "医生", "医院", "牙医", "孩子", "女儿",
    "儿子", "妈妈", "爸爸", "父母", "妻子", "丈夫", "朋友", "同事", "老板", "经理", "北京", "上海",
    "广州", "深圳", "杭州", "成都", "南京", "香港", "台北", "猫", "狗",
)

_ZH_VERB_CHARS = frozenset("喝吃看玩做买学打听读写去来坐开住用养")


def has_cjk(text: str) -> bool:
    return _CJK.search(text) is not None


def cjk_count(text: str) -> int:
    return len(_CJK.findall(text))


def is_mostly_chinese(text: str) -> bool:
    """True when CJK characters outnumber Latin words (a mixed message counts as Chinese)."""
    return cjk_count(text) >= max(2, len(_LATIN_WORD.findall(text)))


def detect_language(texts: list[str]) -> str | None:
    """``"Chinese"``, ``"English"`` or None (unknown) for a batch of user texts."""
    joined = "\n".join(texts)
    if not joined.strip():
        return None
    if is_mostly_chinese(joined):
        return "Chinese"
    words = [w.lower() for w in _LATIN_WORD.findall(joined)]
    common = sum(1 for w in words if w in EN_STOPWORDS)
    if words and common / len(words) >= 0.2:
        return "English"
    return None


def split_sentences(text: str) -> list[str]:
    """Sentences of English and Chinese text (end punctuation kept, blanks dropped)."""
    return [part.strip() for part in _SENTENCE_END.split(text) if part and part.strip()]


def en_words(text: str) -> list[str]:
    return _LATIN_WORD.findall(text.replace("\u2019", "'"))


def en_content_words(text: str) -> list[str]:
    """Salient words in order of appearance, original case, stopwords and short words removed."""
    out: list[str] = []
    seen: set[str] = set()
    for word in en_words(text):
        low = word.lower().strip("'-")
        if low.endswith("'s"):
            low = low[:-2]
            word = word[:-2]
        if len(low) < 3 or low in EN_STOPWORDS or low in seen:
            continue
        seen.add(low)
        out.append(word.strip("'-"))
    return out


def zh_terms(text: str) -> list[str]:
    """Salient Chinese terms: known keywords first, then two-character pieces of what is left."""
    terms: list[str] = []
    rest = text
    for word in ZH_KEYWORDS:
        if word in rest:
            terms.append(word)
            rest = rest.replace(word, " ")
    terms.sort(key=text.find)
    for stop in ZH_STOP_TERMS:
        rest = rest.replace(stop, " ")
    for run in _CJK_RUN.findall(rest):
        while len(run) > 2 and run[0] in _ZH_VERB_CHARS:
            run = run[1:]
        if len(run) < 2:
            continue
        if len(run) <= 3:
            terms.append(run[:2])
        else:
            terms.extend(run[i : i + 2] for i in range(0, len(run) - 1, 2))
    return list(dict.fromkeys(terms))


def tags_for(text: str, *, limit: int = 4) -> list[str]:
    """Lowercase topic tags of a statement, Chinese or English."""
    if is_mostly_chinese(text):
        return zh_terms(text)[:limit]
    return [w.lower() for w in en_content_words(text)][:limit]
