"""Shared pieces of the search and scheduler prompts and answer models.

Small on purpose: how texts are clipped and listed, and how list answers are
cleaned, should read the same in every task.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, Literal, TypedDict, TypeVar

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator

from memstream.streams.text.words import detect_language
from memstream.topics.models import MemoryItem


class ChatMessage(TypedDict):
    role: Literal["system", "user", "assistant"]
    content: str


Ctx = TypeVar("Ctx", bound=BaseModel)
Resp = TypeVar("Resp", bound=BaseModel)


@dataclass(frozen=True)
class Task(Generic[Ctx, Resp]):
    """A model task: typed context in, validated response out."""

    name: str
    render: Callable[[Ctx], list[ChatMessage]]
    response: type[Resp]

JSON_ONLY = "Answer with one JSON object and nothing else, no markdown fences:"
JSON_ONLY_TAIL = "Answer with the JSON object only."
ANY_LANGUAGE = (
    "Queries and memories may be in different languages (for example Chinese and English); "
    "judge by meaning, not by shared words."
)
# Per-text budget in prompts: memories and turns are short; a runaway one must not crowd out
# the rest.
TEXT_CHARS = 600


def clip(text: str, limit: int = TEXT_CHARS) -> str:
    """One line, at most ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def numbered(texts: Sequence[str]) -> str:
    """``[0] text`` lines: the indices a rerank or filter answer refers to."""
    return "\n".join(f"[{i}] {clip(t)}" for i, t in enumerate(texts)) or "(none)"


def queries_block(queries: Sequence[str]) -> str:
    lines = [f"- {clip(q)}" for q in queries[:-1]]
    lines.append(f"- (latest) {clip(queries[-1])}")
    return "Recent user queries, oldest first:\n" + "\n".join(lines)


def language_rule(texts: list[str], what: str, source: str = "query") -> str:
    language = detect_language(texts)
    if language is None:
        return f"Write {what} in the language of the {source}. Never translate."
    return f"The {source} is in {language}: write {what} in {language}. Never translate."


def nonblank(value: Any) -> Any:
    """For context models: strips string items and drops the blank ones."""
    if isinstance(value, list):
        return [
            v.strip() if isinstance(v, str) else v
            for v in value
            if not (isinstance(v, str) and not v.strip())
        ]
    return value


def clean_strings(value: Any) -> Any:
    """For answer models: strips items, drops blanks and case-insensitive repeats, keeps order.

    A single string is split on commas, semicolons and newlines (models often answer
    a list as one string). Anything else is returned for pydantic to report.
    """
    if isinstance(value, str):
        value = re.split(r"[,，、;；\n]", value)
    if not isinstance(value, list):
        return value
    out: list[Any] = []
    seen: set[str] = set()
    for item in value:
        text = str(item).strip() if isinstance(item, str | int | float) else item
        if not isinstance(text, str):
            out.append(text)
            continue
        if text and text.lower() not in seen:
            seen.add(text.lower())
            out.append(text)
    return out


class MemoryStatement(BaseModel):
    """One stored memory as a task sees it: text, title, tags, entities, when it happened,
    when it was last written, and its session. The conflict judge and the relation tasks
    both read memories in this one shape."""

    model_config = ConfigDict(frozen=True)

    text: str = Field(min_length=1)
    key: str = ""
    tags: list[str] = Field(default_factory=list)
    entities: list[str] = Field(default_factory=list)
    memory_time: AwareDatetime | None = None
    updated_at: AwareDatetime
    session_id: str | None = None
    # since when it holds, in the conversation's time (``MemoryDescription.valid_from``)
    valid_from: AwareDatetime | None = None

    _clean = field_validator("tags", "entities", mode="before")(nonblank)

    @classmethod
    def of(cls, item: MemoryItem) -> MemoryStatement:
        meta = item.metadata
        return cls(text=item.memory, key=meta.key, tags=list(meta.tags),
                   entities=list(meta.entities), memory_time=meta.memory_time,
                   updated_at=meta.updated_at, session_id=meta.session_id,
                   valid_from=meta.valid_from)

    @property
    def when(self) -> datetime:
        """When it happened if known, else when it was last written."""
        return self.memory_time or self.updated_at
