"""The deterministic ``rules`` stand-in for memory extraction (no model).

One memory per substantive sentence, stored as it was said: a regex rewrite into
the third person garbles text, so the user's own words are kept (first person
and all) and relative dates get their resolved date added in brackets. A named
other speaker's sentences are kept with the name in front ("Melanie: ...");
unnamed assistant turns yield nothing: without a model, anything taken from them
risks being filed as the user's own view.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, Protocol

from memstream.streams.llm.rules.reldates import DateSpan, find_en, find_zh
from memstream.streams.prompts.extraction import (
    ExtractedItem,
    ExtractionContext,
    ExtractionResponse,
)
from memstream.streams.text.words import (
    Script,
    cjk_count,
    en_words,
    script_of,
    short_title,
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
    @property
    def name(self) -> str | None: ...


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
    r"^(?:(?:hi|hello|hey|well|oh|so|btw|by the way|anyway|um|uh|ok|okay|yeah|yes|"
    r"actually|honestly)\b[\s,!.:;-]*)+",
    re.IGNORECASE,
)
_ZH_FILLER = re.compile(
    r"你好|您好|谢谢|多谢|好的|好吧|嗯+|哦+|哈+|再见|拜拜|晚安|早上好|晚上好|没问题|是的|对|行|可以|啊|呀|呢|吧|了|嗨"
)
_ZH_LEAD = re.compile(r"^(?:嗯+|哦+|啊|哈哈+|对了|其实|另外|还有|你好|您好|嗨)[，,、\s!！。~～]*")
_ZH_QUESTION_TAIL = re.compile(r"[吗嘛么呢]\s*$")
# A question often follows what the user tells in the same breath: "my landlord in Sacramento
# finally fixed the heater, anyway whats a good slow cooker recipe?", "我住在台北，最近房租又涨了，
# 有什么找房子的网站推荐吗". The clauses before the one that asks are kept as what was told.
_EMOJI = r"[\U0001F300-\U0001FAFF\u2600-\u27BF]+"  # pictographs and symbols end a clause too
_EN_CLAUSE = re.compile(rf"\s*(?:[,;:]|\.\.\.+|\s[-–—]\s|{_EMOJI})\s*"
                        r"|\s+(?=(?:anyway|btw|but)\b)", re.IGNORECASE)
_EN_ASKS = re.compile(
    r"^(?:(?:anyway|btw|but|and|so|ok|okay|also|just|lol|haha|quick question|question)\b[\s,]*)*"
    r"(?:what|what's|whats|how|how's|hows|any|anyone|anybody|can|could|should|would|will|is|are|"
    r"am|do|does|did|have|has|had|was|were|where|when|why|who|which|shall|wanna|ideas|tips|"
    r"thoughts|suggestions|"
    r"recommendations|pls|please)\b", re.IGNORECASE)
_ZH_CLAUSE = re.compile(rf"[，,、；;：:～~]+|\s+|{_EMOJI}")
_ZH_ASKS = re.compile(r"[吗嘛呢]|(?<!没)什么|(?<![不没])怎么|怎样|如何|哪(?!怕)|"
                      r"为什么|为啥|啥|多少|"
                      r"几[个种点本部条家款样首]|有没有|能不能|可不可以|是不是|要不要|还是.{0,8}(?:好|划算|合适)|求推荐|"
                      r"^推荐|推荐一下|请问")
_JA_QUESTION_TAIL = re.compile(r"(?:か|の)[。．]?\s*$")
_CJK_SCRIPTS = ("zh", "ja")


def _clean(sentence: str, script: Script) -> str:
    """Whitespace normalised and a leading filler ("Hi,", "嗯，") dropped; nothing else."""
    sentence = " ".join(sentence.split())
    lead = _ZH_LEAD if script == "zh" else _EN_LEAD if script == "latin" else None
    rest = lead.sub("", sentence).strip() if lead is not None else sentence
    return rest or sentence


def _substantive(sentence: str, script: Script) -> bool:
    """Not a question, a greeting or filler. Questions ask rather than tell: never stored."""
    if not sentence or _asks(sentence, script):
        return False
    match script:
        case "zh":
            body = re.sub(r"[^\u3400-\u9fff]", "", sentence)
            return cjk_count(_ZH_FILLER.sub("", body)) >= 3 and len(body) >= 4
        case "ja":
            body = re.sub(r"[\s\W]", "", sentence)
            return len(body) >= 4 and not _JA_QUESTION_TAIL.search(sentence)
        case "ko":
            return len(sentence.split()) >= 2
        case "latin":
            words = [w.lower() for w in en_words(sentence)]
            return len(words) >= 3 and not all(w in _EN_FILLER for w in words)


def _asks(sentence: str, script: Script) -> bool:
    """Whether ``sentence`` ends as a question (a question mark; in Chinese, a closing 吗/呢)."""
    body = sentence.rstrip()
    if body.endswith(("?", "？")):
        return True
    return script == "zh" and bool(_ZH_QUESTION_TAIL.search(re.sub(r"[^\u3400-\u9fff]", "", body)))


def _told_before_asking(sentence: str, script: Script) -> str | None:
    """What a question-ending ``sentence`` tells before the clause that asks, or None when it
    only asks ("is it bad that I smoke again?" asks from its first word)."""
    if script not in ("zh", "latin"):
        return None
    clause, asks = (_ZH_CLAUSE, _ZH_ASKS) if script == "zh" else (_EN_CLAUSE, _EN_ASKS)
    starts = [0, *(m.end() for m in clause.finditer(sentence) if 0 < m.end() < len(sentence))]
    for start in starts:
        rest = sentence[start:]
        if asks.match(rest) if script == "latin" else asks.search(_first_clause(rest)):
            return _told(sentence[:start])
    if len(starts) > 1:
        # no clause asks in so many words ("一天两充，换电池还是换手机？", "my boyfriend's bday
        # is next week, gift ideas under $100?"): the question mark ends the one that asks
        return _told(sentence[:starts[-1]])
    return None


def _told(head: str) -> str | None:
    return head.rstrip(" ,，;；:：、~～-–—") or None


def _first_clause(text: str) -> str:
    m = _ZH_CLAUSE.search(text)
    return text[: m.start()] if m else text


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
    r"don't eat|do not eat|don't drink|avoid|no longer|stopped|quit)\b"
    r"|\bI\s+\w+(?:\s+\w+){0,6}\s+every (?:day|morning|evening|night|week|weekend)\b",
    re.IGNORECASE,
)
_EN_TRAIT = re.compile(
    r"\bI am (?:(?:a|an) (?!bit\b|little\b|lot\b)\w+|allergic|vegetarian|vegan|lactose|afraid|"
    r"scared|left-handed|right-handed|introverted|extroverted)\b",
    re.IGNORECASE,
)
_ZH_ADV = r"(?:很|非常|特别|真的|最近|最|比较|一直|也|还|从来|都|平时|通常|一般|开始|已经|现在)*"
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


def _classify(sentence: str, zh: bool) -> tuple[MemoryKind, ItemType, str | None]:
    """Memory type, node type and a category tag for a first-person sentence."""
    en = _expand_contractions(sentence.replace("\u2019", "'"))
    if _ZH_PREF.search(sentence) or _EN_PREF.search(en):
        return "UserMemory", "opinion", "偏好" if zh else "preference"
    if _ZH_HABIT.search(sentence) or _EN_HABIT.search(en):
        return "UserMemory", "fact", "习惯" if zh else "habit"
    if _ZH_TRAIT.search(sentence) or _EN_TRAIT.search(en):
        return "UserMemory", "fact", "个人信息" if zh else "personal"
    if _PLAN.search(sentence):
        return "LongTermMemory", "event", "计划" if zh else "plan"
    return "LongTermMemory", "fact", None


_CONTRACTIONS = [
    (r"\bI'm\b", "I am"),
    (r"\bI've\b", "I have"),
    (r"\bI'll\b", "I will"),
    (r"\bI'd\b", "I would"),
]


def _expand_contractions(text: str) -> str:
    """For the classification patterns only; stored text keeps the user's contractions."""
    for pattern, repl in _CONTRACTIONS:
        text = re.sub(pattern, repl, text, flags=re.IGNORECASE)
    return text


# --------------------------------------------------------------------------- extraction


# Leading words a key drops: who is speaking is known, the title says what about.
def _annotate(text: str, spans: list[DateSpan], zh: bool) -> str:
    """The text with each resolved date added in brackets right after its phrase."""
    out: list[str] = []
    last = 0
    for span in spans:
        out.append(text[last : span.end])
        out.append(f"[{span.label(zh=True)}]" if zh else f" [{span.label()}]")
        last = span.end
    out.append(text[last:])
    return "".join(out)


def item_from_sentence(
    sentence: str, message_id: str, sent_at: datetime, speaker: str | None = None
) -> RuleItem | None:
    """One memory from one sentence, kept as said, or None when it carries nothing to remember.

    ``speaker`` names someone other than the cube's user; their sentence is stored as
    ``"<speaker>: <sentence>"`` and always as a long-term memory.
    """
    script = script_of(sentence)
    sentence = _clean(sentence, script)
    if _asks(sentence, script):
        told = _told_before_asking(sentence, script)
        if told is None:
            return None
        sentence = _clean(told, script)
    if not _substantive(sentence, script):
        return None
    zh = script == "zh"
    memory_type, node_type, category = (
        _classify(sentence, zh) if script in ("zh", "latin") else ("LongTermMemory", "fact", None)
    )
    today = sent_at.date()
    find = {"zh": find_zh, "latin": find_en}.get(script)
    spans = find(sentence, today) if find is not None else []
    value = _annotate(sentence, spans, zh)
    when = next((s.day for s in spans if s.precision != "year"), None)
    if spans and node_type == "fact" and memory_type == "LongTermMemory":
        node_type = "event"
        category = "事件" if zh else "event"
    tags = tags_for(sentence)
    key = short_title(sentence, tags, script)
    if speaker:
        value = f"{speaker}: {value}"
        memory_type = "LongTermMemory"
        tags = [speaker.lower(), *(t for t in tags if t != speaker.lower())]
    if category and category not in tags:
        tags.append(category)
    return RuleItem(
        key=key,
        memory_type=memory_type,
        value=value,
        tags=tags,
        memory_time=when.isoformat() if when else None,
        type=node_type,
        source_message_ids=[message_id],
    )


def extract_chat(messages: Sequence[MessageLike]) -> tuple[list[RuleItem], str]:
    """Memories from what the user, and any named other speaker, said; and an extractive summary."""
    items: list[RuleItem] = []
    seen: set[str] = set()
    for message in messages:
        speaker = (message.name or "").strip() or None
        if message.role == "user":
            speaker = None
        elif message.role != "assistant" or speaker is None:
            continue
        for sentence in split_sentences(message.content):
            item = item_from_sentence(sentence, message.id, message.timestamp, speaker)
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
            script = script_of(group)
            if not _long_enough(group, script):
                continue
            tags = tags_for(group)
            items.append(
                RuleItem(
                    key=heading or short_title(group, tags, script),
                    memory_type="LongTermMemory",
                    value=group,
                    tags=tags,
                    memory_time=None,
                    type="fact",
                )
            )
    return items, _summary([i.value for i in items])


def _long_enough(text: str, script: Script) -> bool:
    match script:
        case "zh":
            return cjk_count(text) >= 6
        case "ja":
            return len(re.sub(r"[\s\W]", "", text)) >= 6
        case "ko" | "latin":
            return len(text.split()) >= 4


def _sentence_groups(paragraph: str, limit: int) -> list[str]:
    groups: list[str] = []
    current = ""
    for sentence in split_sentences(paragraph):
        joiner = "" if script_of(sentence) in _CJK_SCRIPTS or not current else " "
        if current and len(current) + len(sentence) > limit:
            groups.append(current)
            current = sentence
        else:
            current = f"{current}{joiner}{sentence}"
    if current:
        groups.append(current)
    return groups


def _summary(values: list[str], limit: int = 400) -> str:
    """Whole memories joined in order while they fit: extractive, never rewritten."""
    out = ""
    for value in values:
        cjk = out.endswith(("。", "！", "？", "…")) and script_of(value) in _CJK_SCRIPTS
        joiner = "" if not out or cjk else " "
        if len(out) + len(joiner) + len(value) > limit:
            break
        out = f"{out}{joiner}{value}"
    if out or not values:
        return out
    head = values[0][:limit]  # one long value: cut at a word break, not inside a word
    return (head.rsplit(" ", 1)[0] if " " in head else head) + "…"


def rules(ctx: ExtractionContext) -> ExtractionResponse:
    """Deterministic extraction without a model (see the module doc)."""
    if ctx.kind == "chat":
        items, summary = extract_chat(ctx.messages)
    else:
        items, summary = extract_doc(ctx.document_text or "")
    return ExtractionResponse(memories=[_to_model(i) for i in items], summary=summary)


def _to_model(item: RuleItem) -> ExtractedItem:
    return ExtractedItem(
        key=item.key,
        memory_type=item.memory_type,
        value=item.value,
        tags=item.tags,
        memory_time=item.memory_time,
        source_message_ids=item.source_message_ids,
        type=item.type,
    )
