"""Reordering and filtering the scheduler's working-memory candidates.

``RERANK`` orders candidates by relevance to the recent queries, ``FILTER``
drops unrelated ones. Answers are indices and the model cannot know how many
candidates exist, so the caller checks them with ``resolve_order`` /
``resolve_keep`` and keeps its list unchanged when they fail.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from memstream.streams.prompts.promptkit import (
    ANY_LANGUAGE,
    JSON_ONLY,
    JSON_ONLY_TAIL,
    ChatMessage,
    Task,
    nonblank,
    numbered,
    queries_block,
)
from memstream.streams.text.relevance import overlap, query_terms
from memstream.streams.text.words import is_mostly_chinese

# Cosine floors for multilingual-e5-small (query embedding vs passage embedding) on short
# third-person memories, measured on 13 queries x 28 memories: English and cross-language pairs
# score ~0.71-0.79 when unrelated and ~0.74-0.84 when related; Chinese-Chinese pairs sit higher
# across the board (~0.80-0.88 unrelated, 0.83-0.90 related). No single floor serves both (0.80
# keeps every Chinese pair and drops most related English ones), so Chinese pairs get their own.
E5_FLOOR = 0.78
E5_FLOOR_CJK = 0.85


class _Candidates(BaseModel):
    """Queries plus candidate texts (indexed 0..n-1) with optional query similarities."""

    model_config = ConfigDict(frozen=True)

    queries: list[str] = Field(min_length=1)
    candidates: list[str]
    # Per candidate: the highest cosine between its embedding and any query's embedding.
    similarities: list[float] | None = None

    @field_validator("queries", mode="before")
    @classmethod
    def _drop_blank_queries(cls, value: Any) -> Any:
        return nonblank(value)

    @model_validator(mode="after")
    def _one_similarity_per_candidate(self) -> _Candidates:
        if self.similarities is not None and len(self.similarities) != len(self.candidates):
            raise ValueError(
                f"{len(self.similarities)} similarities for {len(self.candidates)} candidates"
            )
        return self

    def overlaps(self) -> list[int]:
        terms = list(dict.fromkeys(t for q in self.queries for t in query_terms(q)))
        return [overlap(terms, text) for text in self.candidates]


class RerankContext(_Candidates):
    pass


def _indices(value: list[int], *, allow_repeats: bool) -> list[int]:
    if any(i < 0 for i in value):
        raise ValueError("indices must be 0 or greater")
    if len(set(value)) != len(value):
        if not allow_repeats:
            raise ValueError("an index appears more than once")
        value = list(dict.fromkeys(value))
    return value


class RerankResponse(BaseModel):
    model_config = ConfigDict(extra="ignore")

    order: list[int]

    @field_validator("order")
    @classmethod
    def _distinct(cls, value: list[int]) -> list[int]:
        return _indices(value, allow_repeats=False)


def resolve_order(order: Sequence[int], n: int) -> list[int]:
    """A full permutation of ``range(n)``: the answer's order, then the omitted indices.

    Raises ``ValueError`` for an index outside ``0..n-1``: the caller keeps its order.
    """
    bad = [i for i in order if not 0 <= i < n]
    if bad:
        raise ValueError(f"indices {bad} are outside 0..{n - 1}")
    seen = list(dict.fromkeys(order))
    listed = set(seen)
    return seen + [i for i in range(n) if i not in listed]


_RERANK_SYSTEM = """\
You order memories for a personal assistant's working memory. Put the memories most useful \
for the user's recent queries first; the latest query matters most. {any_language}

Return the indices of all memories, each exactly once, most relevant first.

{json_only}
{{"order": [2, 0, 1]}}"""


def _candidates_body(ctx: _Candidates) -> str:
    n = len(ctx.candidates)
    return (
        f"{queries_block(ctx.queries)}\n\nMemories ([index] text):\n{numbered(ctx.candidates)}"
        f"\n\nThere are {n} memories (indices 0 to {n - 1}). {JSON_ONLY_TAIL}"
    )


def render_rerank(ctx: RerankContext) -> list[ChatMessage]:
    body = _candidates_body(ctx)
    system = _RERANK_SYSTEM.format(any_language=ANY_LANGUAGE, json_only=JSON_ONLY)
    return [{"role": "system", "content": system}, {"role": "user", "content": body}]




RERANK: Task[RerankContext, RerankResponse] = Task(
    name="scheduler.rerank", render=render_rerank, response=RerankResponse
)


class FilterContext(_Candidates):
    """``similarity_floor`` overrides the language-aware e5 defaults of the rules stand-in."""

    similarity_floor: float | None = Field(default=None, ge=-1.0, le=1.0)

    def floor_for(self, index: int) -> float:
        if self.similarity_floor is not None:
            return self.similarity_floor
        chinese = is_mostly_chinese(self.queries[-1]) and is_mostly_chinese(self.candidates[index])
        return E5_FLOOR_CJK if chinese else E5_FLOOR


class FilterResponse(BaseModel):
    """Indices of the candidates to keep (repeats are harmless and dropped)."""

    model_config = ConfigDict(extra="ignore")

    keep: list[int]

    @field_validator("keep")
    @classmethod
    def _distinct(cls, value: list[int]) -> list[int]:
        return _indices(value, allow_repeats=True)


def resolve_keep(keep: Sequence[int], n: int) -> list[int]:
    """The kept indices in ascending order (the list's current order is kept).

    Raises ``ValueError`` for an index outside ``0..n-1``: the caller keeps every item.
    """
    bad = [i for i in keep if not 0 <= i < n]
    if bad:
        raise ValueError(f"indices {bad} are outside 0..{n - 1}")
    return sorted(set(keep))


_FILTER_SYSTEM = """\
You clean up a personal assistant's working memory. Keep the memories that are related to \
the user's recent queries: they answer them, give useful context (the user's preferences, \
constraints, plans, people and places involved), or are about the same topic. Drop memories \
about unrelated topics. When unsure, keep the memory. {any_language}

Return the indices of the memories to keep.

{json_only}
{{"keep": [0, 2]}}"""


def render_filter(ctx: FilterContext) -> list[ChatMessage]:
    body = _candidates_body(ctx)
    system = _FILTER_SYSTEM.format(any_language=ANY_LANGUAGE, json_only=JSON_ONLY)
    return [{"role": "system", "content": system}, {"role": "user", "content": body}]




FILTER: Task[FilterContext, FilterResponse] = Task(
    name="scheduler.filter", render=render_filter, response=FilterResponse
)
