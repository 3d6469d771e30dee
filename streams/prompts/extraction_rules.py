"""The deterministic ``rules`` stand-in for memory extraction (no model).

One memory per substantive user sentence, rewritten in the third person with
simple relative dates made absolute. Assistant turns yield nothing: without a
model, anything taken from them risks being filed as the user's own view.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, Protocol

from streams.prompts.reldates import resolve_en, resolve_zh
from streams.prompts.textutil import (
    cjk_count,
    en_content_words,
    en_words,
    is_mostly_chinese,
    split_sentences,
    tags_for,
    words_of,
)

MemoryKind = Literal["LongTermMemory", "UserMemory"]
ItemType = Literal["fact", "event", "opinion", "procedure"]


class MessageLike(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def role(self) -> str: ...
    @property
    def content(self) -> str: ...
    @property
    def timestamp(self) -> datetime: ...


@dataclass
class RuleItem:
    key: str
    memory_type: MemoryKind
    value: str
    tags: list[str]
    memory_time: str | None
    type: ItemType
    source_message_ids: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- filters

_EN_FILLER = frozenset(
    words_of(
        """hi hello hey thanks thank you ok okay sure bye goodbye yes yeah yep no nope lol haha cool
    great nice good morning evening night awesome alright please welcome see later cheers so much
    very a lot bye-bye fine got it sounds perfect wow oh hmm"""
    )
)
_EN_LEAD = re.compile(
    r"^(?:(?:hi|hello|hey|well|oh|so|also|btw|by the way|anyway|um|uh|ok|okay|yeah|yes|"
    r"actually|honestly|and|but)\b[\s,!.:;-]*)+",
    re.IGNORECASE,
)
_ZH_FILLER = re.compile(
    r"你好|您好|谢谢|多谢|好的|好吧|嗯+|哦+|哈+|再见|拜拜|晚安|早上好|晚上好|没问题|是的|对|行|可以|啊|呀|呢|吧|了|嗨"
)
_ZH_LEAD = re.compile(r"^(?:嗯+|哦+|啊|哈哈+|对了|其实|另外|还有|你好|您好|嗨)[，,、\s!！。~～]*")
_ZH_QUESTION_TAIL = re.compile(r"[吗嘛么呢]\s*$")


def _clean(sentence: str) -> str:
    sentence = sentence.replace("\u2019", "'").strip()
    if is_mostly_chinese(sentence):
        return _ZH_LEAD.sub("", sentence).strip()
    sentence = re.sub(r"\bi(?=\b|')", "I", sentence)  # chat-style lowercase "i"
    return _EN_LEAD.sub("", sentence).strip()


def _substantive(sentence: str) -> bool:
    if not sentence or sentence.rstrip().endswith(("?", "？")):
        return False
    if is_mostly_chinese(sentence):
        body = re.sub(r"[^\u3400-\u9fff]", "", sentence)
        if _ZH_QUESTION_TAIL.search(body):
            return False
        return cjk_count(_ZH_FILLER.sub("", body)) >= 3 and len(body) >= 4
    words = [w.lower() for w in en_words(sentence)]
    return len(words) >= 3 and not all(w in _EN_FILLER for w in words)


# --------------------------------------------------------------------------- classification

_EN_ADV = r"(?:really|absolutely|totally|also|just|still|definitely|genuinely|quite|generally|do)"
_EN_PREF = re.compile(
    rf"\bI\s+(?:{_EN_ADV}\s+)*(?:like|love|prefer|hate|enjoy|dislike|adore|can't stand|"
    r"cannot stand|don't like|do not like|am into|am a (?:big )?fan of)\b"
    r"|\bmy favou?rite\b",
    re.IGNORECASE,
)
_EN_HABIT = re.compile(
    rf"\bI\s+(?:{_EN_ADV}\s+)*(?:usually|always|never|often|rarely|normally|tend to|"
    r"don't eat|do not eat|don't drink|avoid)\b"
    r"|\bI\s+\w+(?:\s+\w+){0,6}\s+every (?:day|morning|evening|night|week|weekend)\b",
    re.IGNORECASE,
)
_EN_TRAIT = re.compile(
    r"\bI am (?:(?:a|an) (?!bit\b|little\b|lot\b)\w+|allergic|vegetarian|vegan|lactose|afraid|"
    r"scared|left-handed|right-handed|introverted|extroverted)\b",
    re.IGNORECASE,
)
_ZH_ADV = r"(?:很|非常|特别|真的|最|比较|一直|也|还|从来|都|平时|通常|一般)*"
_ZH_PREF = re.compile(rf"我{_ZH_ADV}(?:喜欢|爱(?!人)|讨厌|不喜欢|偏好|偏爱|受不了)|我最喜欢")
_ZH_HABIT = re.compile(
    rf"我{_ZH_ADV}(?:习惯|经常|总是|每天|每周|每晚|从不|不吃|不喝|常常|通常|平时|一般|往往)"
)
_ZH_TRAIT = re.compile(rf"我{_ZH_ADV}(?:是(?!说|在|不是)|对.{{1,12}}过敏|害怕|擅长|吃素)")
_PLAN = re.compile(
    r"\b(?:will|going to|plan|plans|planning|intend|intends|scheduled|appointment)\b"
    r"|打算|计划|准备|要去|安排|预约",
    re.IGNORECASE,
)


def _classify(sentence: str) -> tuple[MemoryKind, ItemType, str | None]:
    """Memory type, node type and a category tag for a user sentence."""
    en = _expand_contractions(sentence)
    zh = is_mostly_chinese(sentence)
    if _ZH_PREF.search(sentence) or _EN_PREF.search(en):
        return "UserMemory", "opinion", "偏好" if zh else "preference"
    if _ZH_HABIT.search(sentence) or _EN_HABIT.search(en):
        return "UserMemory", "fact", "习惯" if zh else "habit"
    if _ZH_TRAIT.search(sentence) or _EN_TRAIT.search(en):
        return "UserMemory", "fact", "个人信息" if zh else "personal"
    if _PLAN.search(sentence):
        return "LongTermMemory", "event", "计划" if zh else "plan"
    return "LongTermMemory", "fact", None


# --------------------------------------------------------------------------- third person

_CONTRACTIONS = [
    (r"\bI'm\b", "I am"),
    (r"\bI've\b", "I have"),
    (r"\bI'll\b", "I will"),
    (r"\bI'd\b", "I would"),
    (r"\bwe're\b", "we are"),
    (r"\bwe've\b", "we have"),
    (r"\bwe'll\b", "we will"),
    (r"\byou're\b", "you are"),
]
_KEEP_VERBS = frozenset(
    words_of(
        """will would can could should shall might may must can't won't couldn't wouldn't shouldn't
    didn't wasn't was did had went saw got made took came met bought ate drank ran wrote began
    felt found gave knew left lost paid put said sent spent spoke stood taught thought told
    understood won brought built caught chose drove fell flew forgot grew heard held kept led
    meant rode sang sat slept swam threw woke wore became"""
    )
)
_IRREGULAR_3RD = {
    "am": "is",
    "have": "has",
    "do": "does",
    "go": "goes",
    "don't": "doesn't",
    "haven't": "hasn't",
    "be": "is",
    "can't": "can't",
}
_ADVERBS = (
    r"really|absolutely|totally|also|just|still|definitely|usually|always|never|often|"
    r"sometimes|rarely|normally|generally|actually|probably|mostly|only|even|"
    r"kind of|sort of|not"
)
_I_VERB = re.compile(rf"\bI((?:\s+(?:{_ADVERBS}))*)\s+([A-Za-z']+)")
_PRONOUNS = [
    (r"\bmy\b", "the user's"),
    (r"\bmine\b", "the user's"),
    (r"\bmyself\b", "the user"),
    (r"\bme\b", "the user"),
    (r"(?-i:\bI\b)", "the user"),
    (r"\bour\b", "the user's"),
    (r"\bours\b", "the user's"),
    (r"(?-i:\bus\b)", "the user and others"),
    (r"\bwe\b", "the user and others"),
    (r"\byour\b", "the assistant's"),
    (r"\byours\b", "the assistant's"),
    (r"\byou\b", "the assistant"),
]


def _expand_contractions(text: str) -> str:
    for pattern, repl in _CONTRACTIONS:
        text = re.sub(pattern, repl, text, flags=re.IGNORECASE)
    return text


def _third_person_verb(verb: str) -> str:
    low = verb.lower()
    if low in _IRREGULAR_3RD:
        return _IRREGULAR_3RD[low]
    if low in _KEEP_VERBS or low.endswith("ed") or "'" in low:
        return verb
    if re.search(r"(?:s|x|z|ch|sh|o)$", low):
        return verb + "es"
    if re.search(r"[^aeiou]y$", low):
        return verb[:-1] + "ies"
    return verb + "s"


def _en_third_person(text: str) -> str:
    text = _expand_contractions(text)
    text = _I_VERB.sub(lambda m: f"the user{m[1]} {_third_person_verb(m[2])}", text)
    for pattern, repl in _PRONOUNS:
        text = re.sub(pattern, repl, text, flags=re.IGNORECASE)
    text = text.strip().rstrip(".!…~ ").strip()
    return (text[:1].upper() + text[1:] + ".") if text else text


_ZH_MY = re.compile(
    r"我(?=妈妈|爸爸|妈|爸|妹妹|姐姐|哥哥|弟弟|老婆|老公|妻子|丈夫|女儿|儿子|孩子|朋友|同事|老板|"
    r"家人|父母|男朋友|女朋友|室友|同学|老师|公司|家|邻居|医生|狗|猫)"
)


def _zh_third_person(text: str) -> str:
    text = _ZH_MY.sub("用户的", text)
    for src, dst in (
        ("我们", "用户及其同伴"),
        ("咱们", "用户及其同伴"),
        ("我", "用户"),
        ("您", "助手"),
        ("你", "助手"),
    ):
        text = text.replace(src, dst)
    text = text.strip().rstrip("。！!~～.… ")
    if "用户" not in text:
        text = "用户提到" + text
    return text + "。"


# --------------------------------------------------------------------------- pronouns

_EN_RELATIVES = {
    "she": "wife sister mother mom mum daughter girlfriend aunt grandmother niece",
    "he": "husband brother father dad son boyfriend uncle grandfather nephew",
    "either": "friend boss colleague partner manager teacher doctor neighbor neighbour cousin "
    "roommate coworker",
}
_EN_GENDER = {w: g for g, ws in _EN_RELATIVES.items() for w in ws.split()}
_EN_PERSON = re.compile(r"\b[Mm]y (" + "|".join(_EN_GENDER) + r")\b(?:,?\s+([A-Z][a-z]+))?")
_EN_LEAD_PRONOUN = re.compile(r"^(She|He|Her|His)\b")
_ZH_GENDER = {
    **dict.fromkeys(words_of("妈妈 妈 姐姐 妹妹 老婆 妻子 女儿 女朋友 奶奶 外婆"), "她"),
    **dict.fromkeys(words_of("爸爸 爸 哥哥 弟弟 老公 丈夫 儿子 男朋友 爷爷 外公"), "他"),
    **dict.fromkeys(words_of("朋友 同事 老板 经理 老师 室友 同学 邻居 医生"), "either"),
}
_ZH_PERSON = re.compile(r"我(?:的)?(" + "|".join(sorted(_ZH_GENDER, key=len, reverse=True)) + ")")


class _People:
    """The last relative the user named, so a following "she"/"他" can be spelled out."""

    def __init__(self) -> None:
        self.en: dict[str, str] = {}
        self.zh: dict[str, str] = {}

    def resolve(self, sentence: str) -> str:
        if is_mostly_chinese(sentence):
            sentence = self._resolve_zh(sentence)
            for match in _ZH_PERSON.finditer(sentence):
                self._remember(self.zh, _ZH_GENDER[match[1]], f"我的{match[1]}", ("她", "他"))
            return sentence
        sentence = self._resolve_en(sentence)
        for match in _EN_PERSON.finditer(sentence):
            phrase = f"my {match[1]}" + (f" {match[2]}" if match[2] else "")
            self._remember(self.en, _EN_GENDER[match[1]], phrase, ("she", "he"))
        return sentence

    @staticmethod
    def _remember(table: dict[str, str], gender: str, phrase: str, both: tuple[str, str]) -> None:
        for key in both if gender == "either" else (gender,):
            table[key] = phrase

    def _resolve_en(self, sentence: str) -> str:
        match = _EN_LEAD_PRONOUN.match(sentence)
        if match is None:
            return sentence
        pronoun = match[1].lower()
        person = self.en.get("she" if pronoun in ("she", "her") else "he")
        if person is None:
            return sentence
        replacement = person if pronoun in ("she", "he") else f"{person}'s"
        return replacement[:1].upper() + replacement[1:] + sentence[match.end() :]

    def _resolve_zh(self, sentence: str) -> str:
        for pronoun in ("她", "他"):
            person = self.zh.get(pronoun)
            if person is not None:
                sentence = re.sub(pronoun + "(?!们)", person, sentence)
        return sentence


# --------------------------------------------------------------------------- extraction


_ZH_DATE_TEXT = re.compile(r"\d{4}年(?:\d{1,2}月)?(?:\d{1,2}日)?(?:开始的那一周|早上|晚上)?")


def _key(value: str, tags: list[str], zh: bool) -> str:
    if zh:
        core = _ZH_DATE_TEXT.sub("", value.replace("用户", ""))
        core = re.sub(r"[\s。！？，、,.!?：:；;]", "", core)
        core = re.sub(r"^(?:提到|及其同伴|的|和)+", "", core)
        return core[:12] or "、".join(tags[:2])
    words = [w for w in en_content_words(value) if w.lower() not in {"the", "user"}]
    return " ".join(words[:4]) or " ".join(tags[:2])


def item_from_sentence(sentence: str, message_id: str, sent_at: datetime) -> RuleItem | None:
    """One memory from one user sentence, or None when it carries nothing to remember."""
    sentence = _clean(sentence)
    if not _substantive(sentence):
        return None
    zh = is_mostly_chinese(sentence)
    memory_type, node_type, category = _classify(sentence)
    today = sent_at.date()
    if zh:
        resolved, when = resolve_zh(sentence, today)
        value = _zh_third_person(resolved)
    else:
        resolved, when = resolve_en(sentence, today)
        value = _en_third_person(resolved)
    if when is not None and node_type == "fact" and memory_type == "LongTermMemory":
        node_type = "event"
        category = "事件" if zh else "event"
    tags = tags_for(sentence if not zh else value)
    if category and category not in tags:
        tags.append(category)
    return RuleItem(
        key=_key(value, tags, zh),
        memory_type=memory_type,
        value=value,
        tags=tags,
        memory_time=when.isoformat() if when else None,
        type=node_type,
        source_message_ids=[message_id],
    )


def extract_chat(messages: Sequence[MessageLike]) -> tuple[list[RuleItem], str]:
    """Memories from the user's messages, and a summary that concatenates them."""
    items: list[RuleItem] = []
    seen: set[str] = set()
    people = _People()
    for message in messages:
        if message.role != "user":
            continue
        for sentence in split_sentences(message.content):
            sentence = people.resolve(sentence)
            item = item_from_sentence(sentence, message.id, message.timestamp)
            if item is not None and item.value not in seen:
                seen.add(item.value)
                items.append(item)
    return items, _summary([i.value for i in items])


def extract_doc(text: str) -> tuple[list[RuleItem], str]:
    """One long-term memory per paragraph (long paragraphs split into sentence groups)."""
    items: list[RuleItem] = []
    heading: str | None = None
    for block in re.split(r"\n\s*\n", text):
        para = " ".join(block.split())
        if not para:
            continue
        single_line = "\n" not in block.strip()
        if len(para) < 80 and single_line and not re.search(r"[.!?。！？:：;；]$", para):
            heading = para.lstrip("#*- ").strip() or heading
            continue
        for group in _sentence_groups(para, 500):
            zh = is_mostly_chinese(group)
            if (cjk_count(group) < 6) if zh else (len(en_words(group)) < 4):
                continue
            tags = tags_for(group)
            items.append(
                RuleItem(
                    key=heading or _key(group, tags, zh),
                    memory_type="LongTermMemory",
                    value=group,
                    tags=tags,
                    memory_time=None,
                    type="fact",
                )
            )
    return items, _summary([i.value for i in items])


def _sentence_groups(paragraph: str, limit: int) -> list[str]:
    groups: list[str] = []
    current = ""
    for sentence in split_sentences(paragraph):
        joiner = "" if is_mostly_chinese(sentence) or not current else " "
        if current and len(current) + len(sentence) > limit:
            groups.append(current)
            current = sentence
        else:
            current = f"{current}{joiner}{sentence}"
    if current:
        groups.append(current)
    return groups


def _summary(values: list[str], limit: int = 400) -> str:
    out = ""
    for value in values:
        joiner = "" if not out or is_mostly_chinese(value) else " "
        if len(out) + len(joiner) + len(value) > limit:
            break
        out = f"{out}{joiner}{value}"
    return out or (values[0][:limit] if values else "")
