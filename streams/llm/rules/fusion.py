"""The ``rules`` stand-in for the tasks of ``streams.prompts.fusion``."""

from __future__ import annotations

from memstream.streams.llm.rules.conflict import informativeness
from memstream.streams.prompts.conflict import MemoryStatement
from memstream.streams.prompts.fusion import (
    MAX_TAGS,
    FusionContext,
    FusionResponse,
    fallback_key,
)
from memstream.streams.text.words import is_mostly_chinese


def rules(ctx: FusionContext) -> FusionResponse:
    """Keep the newer statement (contradiction), the more informative one (redundant), or both."""
    newer, older = _by_age(ctx.existing, ctx.new)
    if ctx.relation == "contradictory":
        fresh = [t for t in older.tags if not _stale(t, older.text, newer.text)]
        return _response(newer.text, newer, older, newer.tags + fresh)
    if ctx.relation == "redundant":
        kept, other = (
            (older, newer) if informativeness(older.text) > informativeness(newer.text)
            else (newer, older)
        )
        return _response(kept.text, kept, other, kept.tags + other.tags)
    return _response(join_statements(older.text, newer.text), newer, older,
                     newer.tags + older.tags)


def _by_age(existing: MemoryStatement, new: MemoryStatement) -> tuple[MemoryStatement, ...]:
    """(newer, older); the new memory wins a tie because it arrived later."""
    return (existing, new) if existing.updated_at > new.updated_at else (new, existing)


def _stale(tag: str, older_text: str, newer_text: str) -> bool:
    """A tag naming a value only the superseded statement had ("berlin" after a move)."""
    word = tag.strip().lower()
    return bool(word) and word in older_text.lower() and word not in newer_text.lower()


def _response(
    text: str, first: MemoryStatement, second: MemoryStatement, tags: list[str]
) -> FusionResponse:
    return FusionResponse(
        memory=text.strip(),
        key=first.key or second.key or fallback_key(text),
        tags=_dedupe(tags)[:MAX_TAGS],
    )


def _dedupe(tags: list[str]) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    for tag in tags:
        norm = tag.strip().lower()
        if norm and norm not in seen:
            seen.add(norm)
            out.append(tag.strip())
    return out


def join_statements(first: str, second: str) -> str:
    """Two sentences as one memory, each closed by the punctuation of its language."""
    parts = [_closed(first), _closed(second)]
    return "".join(parts) if is_mostly_chinese(first + second) else " ".join(parts)


def _closed(sentence: str) -> str:
    text = sentence.strip()
    if text and text[-1] not in ".!?。！？":
        text += "。" if is_mostly_chinese(text) else "."
    return text
