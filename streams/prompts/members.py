"""What the group tasks (aggregate concepts, cluster summaries) share: members, tag statistics.

A group of memories is shown to the model as numbered members with their keys and tags;
the ``rules`` stand-ins build titles from the tags the members have in common. Tags such as
"preference" or "plan" say what kind of memory something is, not what it is about, so they
never make a concept on their own.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from streams.prompts.fusion import fallback_key
from streams.prompts.promptkit import clean_strings, clip, nonblank
from streams.prompts.textutil import EN_STOPWORDS, is_mostly_chinese, tags_for, words_of
from topics.models import MemoryItem

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

# Member keys quoted in a rules-mode value or background before "and N more".
MAX_LISTED_KEYS = 5
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


def joined(words: Sequence[str], chinese: bool) -> str:
    return ("、" if chinese else ", ").join(words)


def listed_keys(members: Sequence[MemberNote], chinese: bool) -> str:
    """The first members' titles; the rest counted."""
    titles = list(dict.fromkeys(m.title for m in members))
    shown = titles[:MAX_LISTED_KEYS]
    rest = len(titles) - len(shown)
    text = ("；" if chinese else "; ").join(shown)
    if rest:
        text += f"等另外{rest}条" if chinese else f"; and {rest} more"
    return text


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
