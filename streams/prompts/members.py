"""What the group tasks (aggregate concepts, cluster summaries) share: members, tag statistics.

A group of memories is shown to the model as numbered members with their keys and tags;
the ``rules`` stand-ins build titles from the tags the members have in common. Tags such as
"preference" or "plan" say what kind of memory something is, not what it is about, so they
never make a concept on their own.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from memstream.streams.prompts.fusion import fallback_key
from memstream.streams.prompts.promptkit import clean_strings, clip, nonblank
from memstream.streams.text.words import EN_STOPWORDS, is_mostly_chinese, tags_for, words_of
from memstream.topics.models import MemoryItem

# Kinds of memory, not subjects (the extraction stand-in adds the first line as category tags).
GENERIC_TAGS = frozenset(
    words_of("""
    preference preferences plan plans habit habits personal event events fact facts
    user users assistant memory memories experience experiences trait traits opinion opinions
    info information general misc miscellaneous other others note notes life lifestyle daily
    thing things stuff activity activities topic topics concept concepts summary
    偏好 习惯 个人信息 计划 事件 用户 助手 记忆 事实 经历 个人 信息 其他 其它 生活 日常 观点
    喜好 爱好 话题 主题 概念 总结
    """)
)

MAX_TAGS = 5


class MemberNote(BaseModel):
    """One member of a group as the model sees it: the text, its title and its tags."""

    model_config = ConfigDict(frozen=True)

    text: str = Field(min_length=1)
    key: str = ""
    tags: list[str] = Field(default_factory=list)

    _clean_tags = field_validator("tags", mode="before")(nonblank)

    @classmethod
    def of(cls, item: MemoryItem) -> MemberNote:
        """A stored node (a fact, or a concept summary for a topic) as a group member."""
        return cls(text=item.memory, key=item.metadata.key, tags=list(item.metadata.tags))

    @property
    def title(self) -> str:
        """The key, or the first words of the text when the member has none."""
        return self.key.strip() or fallback_key(self.text)


def norm_tag(tag: str) -> str:
    """Tags compare case-insensitively, with inner whitespace collapsed."""
    return " ".join(tag.split()).lower()


def is_generic(tag: str) -> bool:
    """True for tags that name a kind of memory or a filler word, not a subject."""
    norm = norm_tag(tag)
    if not norm:
        return True
    if norm in GENERIC_TAGS or norm in EN_STOPWORDS:
        return True
    return norm.isascii() and len(norm) < 2


def ranked_tags(tag_lists: Iterable[Sequence[str]]) -> list[tuple[str, int]]:
    """(tag, how many lists carry it), most common first, ties in order of first appearance.

    Each list counts a tag once; the spelling kept is the first one seen.
    """
    counts: Counter[str] = Counter()
    spelling: dict[str, str] = {}
    for tags in tag_lists:
        seen: set[str] = set()
        for tag in tags:
            norm = norm_tag(tag)
            if not norm or norm in seen:
                continue
            seen.add(norm)
            spelling.setdefault(norm, " ".join(tag.split()))
            counts[norm] += 1
    order = list(spelling)
    ranked = sorted(order, key=lambda t: (-counts[t], order.index(t)))
    return [(spelling[t], counts[t]) for t in ranked]


def subject_tags(members: Sequence[MemberNote]) -> list[tuple[str, int]]:
    """Non-generic tags of the members, most common first.

    Members without tags contribute the salient words of their text, so a group of
    untagged memories still gets a title.
    """
    lists = [m.tags if m.tags else tags_for(m.text, limit=6) for m in members]
    return [(tag, n) for tag, n in ranked_tags(lists) if not is_generic(tag)]


def group_is_chinese(members: Sequence[MemberNote]) -> bool:
    """The group's language by member count: Chinese when most members are mostly Chinese."""
    chinese = sum(1 for m in members if is_mostly_chinese(m.text))
    if chinese * 2 == len(members):
        return is_mostly_chinese(members[0].text)
    return chinese * 2 > len(members)


# --------------------------------------------------------------------------- extractive text
# Without a model the stand-ins quote rather than write: the most central members verbatim,
# whole sentences only, under a title of whole-word tags. Pieces of different memories spliced
# into one line read like a statement nobody made.

MAX_STATEMENTS = 3
# A longer member is quoted by its first sentence (whole), or passed over.
MAX_STATEMENT_CHARS = 240
# Further statements are quoted while the summary stays this short (the first always is).
MAX_SUMMARY_CHARS = 480
TITLE_SEPARATOR = " · "

_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_ZH_ENDS = "。！？"
_EN_ENDS = ".!?…"
_CLOSERS = "\"'”’)）」』"
_TRAILING = ",;:，；：、-–—"
# Words before a period that do not end a sentence.
_ABBREVIATIONS = frozenset(words_of("mr mrs ms dr st prof jr sr vs etc approx no nr fig e.g i.e"
                                    " a.m p.m u.s cf ca"))
_TITLE_WORDS = re.compile(r"[A-Za-z0-9][A-Za-z0-9'&+.-]*(?: [A-Za-z0-9][A-Za-z0-9'&+.-]*)*")


def sentences(text: str) -> list[str]:
    """The whole sentences of a text, end marks kept.

    Cautious on purpose: after a period the text is cut only before a capital letter or a
    Chinese character, and never after an abbreviation or an initial, so a sentence is
    never cut in two (a missed break merely keeps two sentences together).
    """
    flat = " ".join(text.split())
    out: list[str] = []
    start = 0
    for i, ch in enumerate(flat):
        if i < start or ch not in _ZH_ENDS + _EN_ENDS:
            continue
        end = i + 1
        while end < len(flat) and flat[end] in _CLOSERS + _ZH_ENDS + _EN_ENDS:
            end += 1
        if ch in _EN_ENDS and not _breaks_after(flat, start, i, end):
            continue
        if piece := flat[start:end].strip():
            out.append(piece)
        start = end
    if rest := flat[start:].strip():
        out.append(rest)
    return out


def _breaks_after(flat: str, start: int, mark: int, end: int) -> bool:
    following = flat[end + 1:end + 2] if flat[end:end + 1] == " " else ""
    if not following or not (following.isupper() or _CJK.match(following)):
        return False
    if flat[mark] != ".":
        return True
    word = flat[start:mark].rsplit(" ", 1)[-1].lstrip("\"'“‘(（").lower()
    return len(word) > 1 and word not in _ABBREVIATIONS and "." not in word


def statement(text: str) -> str:
    """A text as one verbatim statement: whitespace squashed, an end mark added if missing."""
    flat = " ".join(text.split())
    if not flat or flat[-1] in _ZH_ENDS + _EN_ENDS + _CLOSERS:
        return flat
    flat = flat.rstrip(_TRAILING).rstrip() or flat
    return flat + ("。" if _CJK.search(flat[-1]) else ".")


def joined_statements(parts: Iterable[str]) -> str:
    """Statements one after another: a space after an English one, none after a Chinese one."""
    out = ""
    for part in parts:
        if out and not out.endswith(tuple(_ZH_ENDS)):
            out += " "
        out += part
    return out


def tag_centrality(members: Sequence[MemberNote]) -> list[float]:
    """How connected each member is: per subject tag it carries, the other members carrying it."""
    lists = [
        {norm_tag(t) for t in (m.tags if m.tags else tags_for(m.text, limit=6))
         if not is_generic(t)}
        for m in members
    ]
    counts = Counter(tag for tags in lists for tag in tags)
    return [float(sum(counts[t] - 1 for t in tags)) for tags in lists]


def central_statements(
    members: Sequence[MemberNote], centrality: Sequence[float] | None = None, *,
    first_sentence_only: bool = False,
) -> list[str]:
    """Statements of the most central members, verbatim, most central first.

    About half the members are quoted, one to ``MAX_STATEMENTS``: a summary that repeats
    every member tells nothing about which of them matter.

    ``centrality``: one score per member, higher is more central (cosine to the cluster's
    centroid); by default how many tags a member shares with the others. A member is quoted
    whole, or by its first sentence when it is long (or with ``first_sentence_only``, for
    topics over concept summaries, whose first sentence is their most central member).
    Repeats are quoted once.
    """
    scores = list(centrality) if centrality is not None else tag_centrality(members)
    limit = max(1, min(MAX_STATEMENTS, (len(members) + 1) // 2))
    order = sorted(range(len(members)), key=lambda i: (-scores[i], i))
    chosen: list[str] = []
    total = 0
    for i in order:
        text = _quotable(members[i].text, first_sentence_only)
        if text is None:
            continue
        norm = text.casefold()
        if any(norm in c.casefold() or c.casefold() in norm for c in chosen):
            continue
        if chosen and total + len(text) + 1 > MAX_SUMMARY_CHARS:
            continue
        chosen.append(text)
        total += len(text) + 1
        if len(chosen) == limit:
            break
    if not chosen:  # every member is one long sentence: quote the most central one whole
        chosen.append(statement(sentences(members[order[0]].text)[0]))
    return chosen


def _quotable(text: str, first_sentence_only: bool) -> str | None:
    parts = sentences(text)
    if not parts:
        return None
    whole = statement(text)
    if not first_sentence_only and len(whole) <= MAX_STATEMENT_CHARS:
        return whole
    first = statement(parts[0])
    return first if len(first) <= MAX_STATEMENT_CHARS else None


def title_word(tag: str, texts: Sequence[str]) -> str | None:
    """A tag fit for a title, or None: English tags must be whole words, not the start of a
    member's word (spelled as the members capitalise them mid-sentence, "Berlin"); Chinese
    ones a short term without punctuation."""
    tag = " ".join(tag.split())
    if _CJK.search(tag):
        plain = all(_CJK.match(ch) or ch.isalnum() for ch in tag)
        return tag if plain and len(tag) <= 8 else None
    if not _TITLE_WORDS.fullmatch(tag):
        return None
    whole = re.compile(rf"(?<![A-Za-z0-9]){re.escape(tag)}(?![A-Za-z0-9])", re.IGNORECASE)
    seen = False
    for text in texts:
        for found in whole.finditer(text):
            seen = True
            before = text[:found.start()].rstrip()
            mid_sentence = bool(before) and before[-1] not in _ZH_ENDS + _EN_ENDS
            if mid_sentence and found.group() != found.group().lower():
                return found.group()
    if not seen:  # "mov" from "moved": the start of a member's word, not a word of its own
        start = re.compile(rf"(?<![A-Za-z0-9]){re.escape(tag)}([A-Za-z]+)", re.IGNORECASE)
        if any(m.group(1).lower() not in ("s", "es") for t in texts for m in start.finditer(t)):
            return None
    return tag


def keyword_title(texts: Sequence[str], ranked: Sequence[tuple[str, int]],
                  limit: int = 3) -> str:
    """"Berlin · nursing · cats": the most common subject tags that are whole words; a third
    only when more than one member carries it. ``texts``: the members' texts."""
    words: list[str] = []
    for tag, count in ranked:
        if len(words) == limit or (len(words) >= 2 and count < 2):
            break
        word = title_word(tag, texts)
        if word and norm_tag(word) not in {norm_tag(w) for w in words}:
            words.append(word)
    return TITLE_SEPARATOR.join(words)


def title_tags(ranked: Sequence[tuple[str, int]], texts: Sequence[str]) -> list[str]:
    """The ranked tags fit for a title (whole words), as the members spell them in their tags."""
    return [tag for tag, _ in ranked if title_word(tag, texts)][:MAX_TAGS]


def members_block(members: Sequence[MemberNote]) -> str:
    """``[i] key | tags | text`` lines for a prompt."""
    lines = []
    for i, m in enumerate(members):
        parts = [f"[{i}]"]
        if m.key.strip():
            parts.append(f"key: {clip(m.key, 80)} |")
        if m.tags:
            parts.append(f"tags: {', '.join(m.tags)} |")
        parts.append(clip(m.text))
        lines.append(" ".join(parts))
    return "\n".join(lines) or "(none)"


def one_line(value: Any) -> Any:
    """For answer models: a text field on one line, whitespace squashed; null becomes ""."""
    if value is None:
        return ""
    return " ".join(value.split()) if isinstance(value, str) else value


def clean_tag_list(value: Any) -> Any:
    """For answer models: ``clean_strings``, with a missing list read as empty."""
    return [] if value is None else clean_strings(value)


def repeats_a_member(value: str, members: Iterable[str]) -> bool:
    """A summary that is one member's statement word for word adds a copy, not a concept
    (the extractive ``rules`` summary of a small cluster quotes only its central member)."""
    said = statement(value).casefold()
    return any(statement(m).casefold() == said for m in members)
