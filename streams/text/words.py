"""Words, titles and tags: the text handling every stage and the ``rules`` stand-in share
(extraction's keys and tags, the add stage's titles, the full-text index's terms).

English and Chinese get tags and keys made of whole words (Chinese segmented by
jieba, loaded lazily and once); other scripts are recognised so that they are
kept as written instead of going through the English or Chinese heuristics.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from functools import lru_cache
from types import ModuleType
from typing import Literal

_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_KANA = re.compile(r"[\u3040-\u30ff\u31f0-\u31ff\uff66-\uff9f]")
_HANGUL = re.compile(r"[\u1100-\u11ff\u3130-\u318f\uac00-\ud7af]")
# Latin letters with their accented forms (so "München" is one word, not "M" + "nchen").
_LETTER = "A-Za-z\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u024f"
_LATIN_WORD = re.compile(rf"[{_LETTER}][{_LETTER}'-]*")
# A title before a name does not end a sentence ("My GP is Dr. Patel").
_TITLES = "".join(rf"(?<!\b{t}\.)" for t in ("Dr", "Mr", "Mrs", "Ms", "St", "Prof", "Mt"))
_SENTENCE_END = re.compile(rf"(?<=[.!?…]){_TITLES}\s+|(?<=[。！？…])|\n+")

Script = Literal["zh", "ja", "ko", "latin"]


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
    asked since longer anymore already yet though although however whether unless until till
    lately recently soon now ever else almost enough around across along toward towards upon
    within without via per among onto away back together instead rather etc gonna wanna gotta
    hi hello hey thanks thank please sure alright cool wow hmm lol haha also too might must
    shall can't won't isn't aren't wasn't weren't hasn't haven't hadn't doesn't don't didn't
    theirs whose whoever whatever whenever wherever someone somebody anyone anybody everyone
    everybody nothing everything everywhere somewhere anywhere nowhere these those such
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

# Function words of other Latin-script languages (German, French, Spanish, Italian,
# Portuguese), so their tags are content words too; English homographs ("die", "war",
# "hat") are left out on purpose.
OTHER_STOPWORDS = frozenset(
    words_of(
    """
    ich du er sie wir ihr mein meine meinen meiner mich mir dich dir uns und oder aber nicht
    der das dem den des ein eine einen einem einer ist sind bin bist habe hast haben wird
    mit von zu zum zur auf aus bei nach für über unter sehr auch noch schon gern gerne
    je tu il elle nous vous ils elles mon ma mes ton ta tes son sa ses le la les un une des
    du et ou mais ne pas est suis sont ai avons dans pour sur avec très aussi que qui
    yo él ella nosotros mi mis tu tus su sus el los las una unos unas y o pero es soy son
    estoy está tengo en con por para muy también io lui noi il lo gli uno della sono ho
    eu ele ela nós meu minha os um uma não com
    """
    )
)

# Parts of speech (jieba's tag set) that never make a Chinese tag: pronouns, numerals,
# measure words, time and direction words, prepositions, conjunctions, adverbs,
# particles, interjections, onomatopoeia, punctuation.
_ZH_SKIP_FLAGS = ("r", "m", "q", "f", "p", "c", "d", "u", "y", "e", "o", "x", "w", "h", "k")
# Time words; checked by pattern because jieba also tags some events as time ("过生日").
_ZH_TIME_WORD = re.compile(
    r"(?:[上下这本每]个?(?:周|星期|礼拜|月)[一二三四五六日天]?|大?[前后今明昨去][天日年晚早]|"
    r"[上下中]午|早上|晚上|傍晚|凌晨|每[天日年月周晚]|[今明昨]日|最近|现在|以前|以后|之前|之后|"
    r"刚才|将来|过去|当时|目前|平时|后来|本月|今年|明年|去年|前年|后年|[\d一二三四五六七八九十两几]+.*)"
)
_ZH_STOP = frozenset(ZH_STOP_TERMS) | frozenset(
    words_of("你好 您好 谢谢 多谢 好的 好吧 再见 拜拜 晚安 没问题 是的 一只 一次 有时 有些")
    + words_of("这样 那样 这么 那么")
)


_KO_STOP = frozenset(words_of("저는 나는 제가 내가 저의 나의 제 내 우리 우리는 우리가 저도 나도"))


def has_cjk(text: str) -> bool:
    return _CJK.search(text) is not None


def cjk_count(text: str) -> int:
    return len(_CJK.findall(text))


def is_mostly_chinese(text: str) -> bool:
    """True when CJK characters outnumber Latin words (a mixed message counts as Chinese).

    Japanese (any kana) and Korean (Hangul outnumbering the Han characters) are not Chinese.
    """
    count = cjk_count(text)
    if count < max(2, len(_LATIN_WORD.findall(text))) or _KANA.search(text):
        return False
    return len(_HANGUL.findall(text)) < count


def script_of(text: str) -> Script:
    """The writing system a statement is in: Chinese, Japanese, Korean or Latin (the rest)."""
    if _KANA.search(text):
        return "ja"
    if is_mostly_chinese(text):
        return "zh"
    if len(_HANGUL.findall(text)) >= max(2, len(_LATIN_WORD.findall(text))):
        return "ko"
    return "latin"


def detect_language(texts: list[str]) -> str | None:
    """``"Chinese"``, ``"English"`` or None (unknown) for a batch of user texts."""
    joined = "\n".join(texts)
    if not joined.strip():
        return None
    if is_mostly_chinese(joined):
        return "Chinese"
    words = [w.lower() for w in _LATIN_WORD.findall(joined)]
    common = sum(1 for w in words if w in EN_STOPWORDS)
    if words and common / len(words) >= 0.2 and script_of(joined) == "latin":
        return "English"
    return None


def split_sentences(text: str) -> list[str]:
    """Sentences (end punctuation kept, blanks dropped); a semicolon does not end one."""
    return [part.strip() for part in _SENTENCE_END.split(text) if part and part.strip()]


def en_words(text: str) -> list[str]:
    return _LATIN_WORD.findall(text.replace("\u2019", "'"))


def en_content_words(text: str) -> list[str]:
    """Salient words in order of appearance, original case, stopwords and short words removed."""
    out: list[str] = []
    seen: set[str] = set()
    for word in en_words(text):
        word = word.strip("'-")
        low = word.lower()
        if low.endswith("'s"):
            low = low[:-2]
            word = word[:-2]
        if len(low) < 3 or low in EN_STOPWORDS or low in OTHER_STOPWORDS or low in seen:
            continue
        seen.add(low)
        out.append(word)
    return out


@lru_cache(maxsize=1)
def _zh_segmenter() -> ModuleType:
    """jieba's part-of-speech tokenizer, imported and its dictionary loaded on first use."""
    import jieba
    import jieba.posseg

    jieba.setLogLevel(logging.WARNING)
    jieba.initialize()
    posseg: ModuleType = jieba.posseg
    return posseg


def zh_words(text: str) -> list[tuple[str, str]]:
    """``text`` segmented by jieba: (word, part of speech) pairs, in order."""
    posseg = _zh_segmenter()
    return [(p.word, p.flag) for p in posseg.cut(text)]


@lru_cache(maxsize=4096)
def _zh_terms(text: str) -> tuple[str, ...]:
    terms: list[str] = []
    for word, flag in zh_words(text):
        if flag == "eng":
            terms.extend(en_content_words(word))
            continue
        if (
            len(word) < 2
            or not _CJK_RUN.fullmatch(word)
            or word in _ZH_STOP
            or flag.startswith(_ZH_SKIP_FLAGS)
            or _ZH_TIME_WORD.fullmatch(word)
        ):
            continue
        terms.append(word)
    return tuple(dict.fromkeys(terms))


def zh_terms(text: str) -> list[str]:
    """Salient Chinese words (jieba), in order: nouns, verbs and names of two characters or more."""
    return list(_zh_terms(text))


def ja_terms(text: str) -> list[str]:
    """Kanji and katakana runs of two characters or more: whole words without a segmenter."""
    runs = re.findall(r"[\u3400-\u4dbf\u4e00-\u9fff]{2,}|[\u30a0-\u30ff]{2,}", text)
    return list(dict.fromkeys(r for r in runs if r != "ー" * len(r)))


def spaced_terms(text: str) -> list[str]:
    """Whole whitespace-separated words (Korean, other Latin-script languages), lowercased."""
    out: list[str] = []
    for raw in text.split():
        word = raw.strip(".,;:!?\"'()[]«»“”‘’…。、！？").lower()
        if len(word) < 2 or word in EN_STOPWORDS or word in OTHER_STOPWORDS or word in _KO_STOP:
            continue
        if not any(ch.isalpha() for ch in word):
            continue
        out.append(word)
    return list(dict.fromkeys(out))


def tags_for(text: str, *, limit: int = 4) -> list[str]:
    """Lowercase topic tags of a statement, each a whole word."""
    match script_of(text):
        case "zh":
            return [t.lower() for t in zh_terms(text)][:limit]
        case "ja":
            return ja_terms(text)[:limit]
        case "ko":
            return spaced_terms(text)[:limit]
        case "latin":
            return [w.lower() for w in en_content_words(text)
                    if w.lower() not in _EN_NOT_TAGS][:limit]


# Words that say nothing about what a statement is about: calendar names (a date is not a
# topic: "May 14" made the tag "may"), and common adjectives, adverbs and light verbs.
_EN_NOT_TAGS = frozenset(words_of("""
    january february march april may june july august september october november december
    monday tuesday wednesday thursday friday saturday sunday weekend weekends
    small big large little light heavy good bad great nice new old best better
    worse worst easy hard quick quickly slow fast long short high low full whole real true
    right wrong different same few first second third fine free busy ready sure happy glad
    take takes took taken taking give gives gave given put puts keep keeps kept try tries
    tried use uses used start starts started finish finishes finished come comes came see
    sees saw seen look looks looked let lets call calls called find finds found bring brings
    brought able
"""))
_TITLE_SKIP_LEAD = frozenset(words_of("i i'm i've i'd i'll my we we're we've our me am are"))
_TITLE_WORDS = 5
_TITLE_EXTRA_WORDS = 2
# Words that open a new clause, or a new phrase: a title ends before them, never on them.
_CLAUSE_BREAKS = frozenset(words_of("""
    and or but nor so yet because since when while where whenever if unless although though
    that which who whom whose
"""))
_PHRASE_BREAKS = _CLAUSE_BREAKS | frozenset(words_of("""
    as than then with without for to of in on at by from into onto about after before during
    until till i i'm you he she we they it me him her us them my your his our their is are
    was were am be been being have has had do does did will would can could should shall
    must might not no
"""))
_ARTICLES = frozenset(words_of("a an the this that these those"))
_TITLE_CJK_CHARS = 12


def short_title(text: str, tags: Sequence[str] = (), script: Script | None = None) -> str:
    """A short title of whole words: the opening phrase of the statement, never cut mid-word
    (Chinese segmented by jieba); ``tags`` stand in when the opening gives nothing usable."""
    match script or script_of(text):
        case "zh":
            return _zh_title(text) or "、".join(tags[:2])
        case "ja":
            body = text.strip().rstrip("。．！!…~～ ")
            if len(body) <= _TITLE_CJK_CHARS * 2:
                return body
            # no segmenter for Japanese: the first clause when short, else the tags
            clause = re.split(r"[、，,。]", body, maxsplit=1)[0]
            return ("・".join(tags[:2]) or clause if len(clause) > _TITLE_CJK_CHARS * 2
                    else clause)
        case "ko":
            return " ".join(text.split()[:3]).rstrip(".!。")
        case "latin":
            return _latin_title(text) or " ".join(tags[:2])


def _latin_title(text: str) -> str:
    clause = re.split(r"[,;:—()\[\]]| - |(?<=[.!?])\s", text.strip(), maxsplit=1)[0]
    words = [w.strip("'-") for w in clause.replace("\u2019", "'").split()]
    words = [w.strip(".!?…\"") for w in words]
    words = [w for w in words if w]
    while words and words[0].lower() in _TITLE_SKIP_LEAD:
        words = words[1:]
    phrase: list[str] = []
    for word in words:
        low = word.lower()
        if len(phrase) >= 2 and low in _CLAUSE_BREAKS:
            break  # "love seafood but I'm allergic": the title is the first clause
        if len(phrase) >= _TITLE_WORDS and (
                low in _PHRASE_BREAKS or phrase[-1].lower() in _PHRASE_BREAKS
                or len(phrase) >= _TITLE_WORDS + _TITLE_EXTRA_WORDS):
            break  # past five words only to finish a phrase ("in the early morning")
        phrase.append(word)
    while phrase and phrase[-1].lower() in _PHRASE_BREAKS | _ARTICLES:
        phrase = phrase[:-1]
    return " ".join(phrase or words[:_TITLE_WORDS])


def _zh_title(text: str) -> str:
    """Whole jieba words from the start of the statement, up to about a dozen characters."""
    out = ""
    for word, flag in zh_words(text):
        if not out and flag.startswith("r"):
            continue  # the leading 我 / 我们
        if re.fullmatch(r"[\s，,。！？!?；;：:、…]+", word):
            if len(out) >= 4:
                break
            continue
        if out and len(out) + len(word) > _TITLE_CJK_CHARS:
            break
        out += word
    return out[: _TITLE_CJK_CHARS * 2]
