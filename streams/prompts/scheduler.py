"""The memory scheduler's model tasks.

``KEYWORDS`` (query → keywords, with ``fallback_keywords`` for when no model
answers) and ``RETRIEVAL_DECISION`` (does working memory already cover the
latest query?) live here; ``RERANK`` and ``FILTER`` live in ``scheduler_rank``
and are re-exported, so stages import every scheduler task from this module.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from memstream.streams.prompts.promptkit import (
    JSON_ONLY,
    JSON_ONLY_TAIL,
    ChatMessage,
    Task,
    clean_strings,
    clip,
    language_rule,
    nonblank,
    numbered,
    queries_block,
)
from memstream.streams.prompts.scheduler_rank import (
    E5_FLOOR,
    E5_FLOOR_CJK,
    FILTER,
    RERANK,
    FilterContext,
    FilterResponse,
    RerankContext,
    RerankResponse,
    render_filter,
    render_rerank,
    resolve_keep,
    resolve_order,
)
from memstream.streams.text.relevance import TextIndex, covered, query_terms
from memstream.streams.text.words import EN_STOPWORDS, detect_language, words_of

__all__ = [
    "E5_FLOOR",
    "E5_FLOOR_CJK",
    "FILTER",
    "KEYWORDS",
    "MAX_EVIDENCE",
    "MAX_KEYWORDS",
    "RERANK",
    "RETRIEVAL_DECISION",
    "DecisionContext",
    "DecisionResponse",
    "FilterContext",
    "FilterResponse",
    "KeywordContext",
    "KeywordResponse",
    "RerankContext",
    "RerankResponse",
    "fallback_keywords",
    "render_decision",
    "render_filter",
    "render_keywords",
    "render_rerank",
    "resolve_keep",
    "resolve_order",
    "fallback_decision",

]

MAX_KEYWORDS = 20
MAX_EVIDENCE = 5


_CJK_CHAR = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_WORD = re.compile(r"[^\W_]+(?:['-][^\W_]+)*")
_ZH_FUNCTION = frozenset(
    "的地得了着过是在和与及或跟同也都就很太更最还又再才不没别把被对给让向从于以之而其"
    "这那哪些个么吗呢吧啊呀哦嗯啦嘛呗我你您他她它们谁什怎"
)




def fallback_keywords(text: str) -> list[str]:
    """Keywords without a model: English words minus stopwords, Chinese content characters.

    Lowercase, in order of first appearance, each once, at most ``MAX_KEYWORDS``.
    """
    out: list[str] = []
    seen: set[str] = set()
    for token in text.replace("\u2019", "'").split():
        for piece in _split_scripts(token):
            if _CJK_CHAR.fullmatch(piece):
                words = [] if piece in _ZH_FUNCTION else [piece]
            else:
                words = [w.lower() for w in _WORD.findall(piece)]
                words = [w for w in words if w not in EN_STOPWORDS]
            for word in words:
                if word not in seen:
                    seen.add(word)
                    out.append(word)
                    if len(out) == MAX_KEYWORDS:
                        return out
    return out


def _split_scripts(token: str) -> list[str]:
    """Single CJK characters and the non-CJK runs between them."""
    pieces: list[str] = []
    run = ""
    for ch in token:
        if _CJK_CHAR.match(ch):
            if run:
                pieces.append(run)
                run = ""
            pieces.append(ch)
        else:
            run += ch
    if run:
        pieces.append(run)
    return pieces


# --------------------------------------------------------------------------- keywords


class KeywordContext(BaseModel):
    model_config = ConfigDict(frozen=True)

    query: str = Field(min_length=1)


class KeywordResponse(BaseModel):
    model_config = ConfigDict(extra="ignore")

    keywords: list[str] = Field(default_factory=list)

    @field_validator("keywords", mode="before")
    @classmethod
    def _clean(cls, value: Any) -> Any:
        value = clean_strings(value)
        return value[:MAX_KEYWORDS] if isinstance(value, list) else value


_KEYWORD_SYSTEM = """\
You extract search keywords from a user's message to a personal assistant. The keywords are \
used to find the user's stored memories about the same things.

Rules:
- Up to {limit} keywords: the people, places, things, activities, events and topics the \
message is about, most important first. Include names and numbers that identify something.
- Leave out filler words, pronouns, greetings and question words.
- Each keyword is a word or a short phrase copied or lightly normalised from the message. \
Do not add words the message does not imply.
- {language}

{json_only}
{{"keywords": ["...", "..."]}}"""


def render_keywords(ctx: KeywordContext) -> list[ChatMessage]:
    rule = language_rule([ctx.query], "the keywords", source="message")
    system = _KEYWORD_SYSTEM.format(limit=MAX_KEYWORDS, language=rule, json_only=JSON_ONLY)
    user = f"Message: {ctx.query.strip()}\n\n{JSON_ONLY_TAIL}"
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]




KEYWORDS: Task[KeywordContext, KeywordResponse] = Task(
    name="scheduler.keywords",
    render=render_keywords,
    response=KeywordResponse,
)

# --------------------------------------------------------------------------- retrieval decision


class DecisionContext(BaseModel):
    """Recent queries (oldest first, the last is the latest), the last answer, working memory."""

    model_config = ConfigDict(frozen=True)

    queries: list[str] = Field(min_length=1)
    last_answer: str | None = None
    working_memory: list[str] = Field(default_factory=list)

    @field_validator("queries", mode="before")
    @classmethod
    def _drop_blank_queries(cls, value: Any) -> Any:
        return nonblank(value)


class DecisionResponse(BaseModel):
    """``missing_evidence``: short descriptions of what is missing, each usable as a query."""

    model_config = ConfigDict(extra="ignore")

    need_retrieval: bool
    missing_evidence: list[str] = Field(default_factory=list)
    reason: str = ""

    @field_validator("missing_evidence", mode="before")
    @classmethod
    def _clean(cls, value: Any) -> Any:
        value = clean_strings(value)
        return value[:MAX_EVIDENCE] if isinstance(value, list) else value

    @model_validator(mode="after")
    def _no_evidence_without_retrieval(self) -> DecisionResponse:
        if not self.need_retrieval:
            self.missing_evidence = []
        return self


_DECISION_SYSTEM = """\
You manage the working memory of a personal assistant: a short list of memories about the \
user that the assistant sees with every message. Decide whether the working memory already \
holds what the assistant needs for the user's latest query, or whether more memories must be \
retrieved from long-term storage first.

Rules:
- Retrieval is needed when answering the latest query well depends on facts about the user \
(preferences, plans, people, past events, constraints) that the working memory does not \
contain. Greetings, thanks and requests that need no personal facts need no retrieval.
- Earlier queries and the assistant's last answer show where the conversation is going; use \
them to understand the latest query, but decide for the latest one.
- missing_evidence: when retrieval is needed, 1 to {limit} short descriptions of the missing \
information, each usable on its own as a search query (for example "the user's dietary \
restrictions"). Empty when no retrieval is needed.
- Write missing_evidence in the language of the latest query. Never translate.
- reason: one short sentence.

{json_only}
{{"need_retrieval": true, "missing_evidence": ["..."], "reason": "..."}}"""


def render_decision(ctx: DecisionContext) -> list[ChatMessage]:
    parts = [queries_block(ctx.queries)]
    if ctx.last_answer and ctx.last_answer.strip():
        parts.append(f"The assistant's last answer: {clip(ctx.last_answer)}")
    parts.append("Current working memory:\n" + numbered(ctx.working_memory))
    language = detect_language([ctx.queries[-1]])
    if language:
        parts.append(f"The latest query is in {language}.")
    parts.append(JSON_ONLY_TAIL)
    system = _DECISION_SYSTEM.format(limit=MAX_EVIDENCE, json_only=JSON_ONLY)
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(parts)}]




RETRIEVAL_DECISION: Task[DecisionContext, DecisionResponse] = Task(
    name="scheduler.retrieval_decision",
    render=render_decision,
    response=DecisionResponse,
)


# Words that carry no information need (a "thanks!" never needs a retrieval).
_SMALL_TALK = frozenset(
    words_of(
        "thanks thank thx hello hey bye goodbye cheers great cool nice okay sure please lol "
        "haha good fine morning 谢谢 谢谢你 谢谢您 你好 您好 好的 再见 嗯嗯 哈哈 早安 晚安 收到"
    )
)


def _small_talk(text: str) -> bool:
    """Only greetings, thanks and filler words: nothing to look up."""
    words = [w.lower() for w in _WORD.findall(text)]
    return bool(words) and all(w in _SMALL_TALK or w in EN_STOPWORDS for w in words)


def fallback_decision(ctx: DecisionContext) -> DecisionResponse:
    """The decision when the model fails (and the ``rules`` stand-in's answer): retrieve when a
    keyword of the latest query appears in no working-memory text."""
    latest = ctx.queries[-1]
    terms = [] if _small_talk(latest) else query_terms(latest) or fallback_keywords(latest)
    if not terms:
        return DecisionResponse(need_retrieval=False, reason="the query has no content words")
    memory = [TextIndex(t) for t in ctx.working_memory]
    missing = [t for t in terms if not covered(t, memory)]
    # Every word somewhere is not enough: twenty items (whole episodes among them) mention
    # most everyday words. One item must hold them all, and the words must not be a new
    # subject: an earlier query of the context asked with them all, or there is none (what
    # was added is what working memory holds). bench/scheduler.py --dev: with the words
    # anywhere, 30 of 80 questions kept a stale working memory.
    earlier = [TextIndex(q) for q in ctx.queries[:-1]]
    asked = not earlier or any(all(covered(t, [q]) for t in terms) for q in earlier)
    if not missing and asked and any(all(covered(t, [m]) for t in terms) for m in memory):
        return DecisionResponse(
            need_retrieval=False, reason="working memory mentions " + ", ".join(terms)
        )
    if not missing:
        return DecisionResponse(
            need_retrieval=True, missing_evidence=[latest],
            reason="a new subject, or no working-memory item mentions all of "
            + ", ".join(terms))
    return DecisionResponse(
        need_retrieval=True,
        missing_evidence=[latest],
        reason="working memory does not mention " + ", ".join(missing),
    )
