"""The Searcher's model tasks: fine-mode goal parsing and memory selection.

``GOAL_PARSER`` turns a query (plus chat history and the top vector hits) into
search keys, tags and 2–5 memory-shaped rephrasings; ``REASONER`` picks the
useful memories from the ranked candidates. ``fallback_ids_from_text`` recovers a
selection when a model answers in prose instead of JSON.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import AliasChoices, AwareDatetime, BaseModel, ConfigDict, Field, field_validator

from memstream.streams.prompts.promptkit import (
    JSON_ONLY_TAIL,
    ChatMessage,
    Task,
    clean_strings,
    clip,
    language_rule,
)

GoalType = Literal["retrieval", "qa", "generation"]

# Prompt budget: the parse needs the recent turns, not the whole conversation.
HISTORY_TURNS = 10


# --------------------------------------------------------------------------- goal parser


class HistoryTurn(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    role: Literal["user", "assistant", "system", "tool"]
    content: str


class GoalContext(BaseModel):
    """The query to parse, what was said before it, and the memories a first search found."""

    model_config = ConfigDict(frozen=True)

    query: str = Field(min_length=1)
    chat_history: list[HistoryTurn] = Field(default_factory=list)
    context_memories: list[str] = Field(default_factory=list)
    now: AwareDatetime


class GoalResponse(BaseModel):
    """What to search for; ``memories`` are phrased like the stored memories that would match."""

    model_config = ConfigDict(extra="ignore")

    keys: list[str] = Field(min_length=1)
    tags: list[str] = Field(default_factory=list)
    goal_type: GoalType = "retrieval"
    rephrased_instruction: str = ""
    internet_search: bool = False
    memories: list[str] = Field(min_length=2, max_length=5)

    @field_validator("keys", "tags", "memories", mode="before")
    @classmethod
    def _clean(cls, value: Any) -> Any:
        return clean_strings(value)

    @field_validator("goal_type", mode="before")
    @classmethod
    def _goal_type_lower(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("rephrased_instruction", mode="before")
    @classmethod
    def _strip(cls, value: Any) -> Any:
        return value.strip() if isinstance(value, str) else value


_GOAL_SYSTEM = """\
You prepare memory searches for a personal assistant. The assistant keeps memories about its \
user as short third-person statements such as "The user is allergic to peanuts." or \
"用户下周三去上海出差。". Given the user's latest query, the recent conversation and a few \
memories a quick search already found, work out what to look up.

Rules:
- Resolve references: replace pronouns and vague words in the query ("it", "she", "that \
trip", "那个") by what they refer to in the conversation. If the conversation does not say, \
leave them as they are.
- Use only what the query, the conversation and the listed memories say. Do not add facts, \
names, places or dates of your own.
- {language}
- keys: 1 to 6 short search phrases naming the things the query is about (people, places, \
objects, activities, events).
- tags: 1 to 6 single-word or two-word topic labels, lowercase where the language has case.
- goal_type: "qa" when the user asks a question, "generation" when the user wants something \
written or produced (a message, a plan, a summary), otherwise "retrieval".
- rephrased_instruction: the query rewritten as one clear, self-contained request, with \
references resolved and relative dates turned into calendar dates using the current time.
- internet_search: true only when answering needs current public information (news, \
weather, prices, schedules) that personal memories cannot hold.
- memories: 2 to 5 different statements, each written the way a stored memory that answers \
or serves the query would be written ("The user …" / "用户……"). They are search probes, \
not facts: do not decide the answer, describe what the matching memory would be about.

Answer with one JSON object and nothing else, no markdown fences:
{{"keys": ["..."], "tags": ["..."], "goal_type": "retrieval | qa | generation", \
"rephrased_instruction": "...", "internet_search": false, "memories": ["...", "..."]}}"""


def render_goal(ctx: GoalContext) -> list[ChatMessage]:
    """System rules plus the query with its recent history and the first vector hits."""
    language = language_rule([ctx.query], "keys, tags, rephrased_instruction and memories")
    parts = [f"Current time: {ctx.now.isoformat(timespec='minutes')} ({ctx.now:%A})"]
    turns = ctx.chat_history[-HISTORY_TURNS:]
    if turns:
        lines = [f"{t.role}: {clip(t.content)}" for t in turns]
        parts.append("Recent conversation (oldest first):\n" + "\n".join(lines))
    if ctx.context_memories:
        lines = [f"- {clip(m)}" for m in ctx.context_memories]
        parts.append("Memories found by a first search (may be unrelated):\n" + "\n".join(lines))
    parts.append(f"Query: {ctx.query.strip()}")
    parts.append(JSON_ONLY_TAIL)
    return [
        {"role": "system", "content": _GOAL_SYSTEM.format(language=language)},
        {"role": "user", "content": "\n\n".join(parts)},
    ]














GOAL_PARSER: Task[GoalContext, GoalResponse] = Task(
    name="search.goal_parser", render=render_goal, response=GoalResponse
)


# --------------------------------------------------------------------------- reasoner


class ReasonerCandidate(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str = Field(min_length=1)
    text: str


class ReasonerContext(BaseModel):
    """The query and the reranked candidates, best first."""

    model_config = ConfigDict(frozen=True)

    query: str = Field(min_length=1)
    candidates: list[ReasonerCandidate]


class ReasonerResponse(BaseModel):
    """Ids of the useful candidates, most useful first. Unknown ids are the caller's to drop."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    selected_ids: list[str] = Field(
        validation_alias=AliasChoices("selected_ids", "ids", "selected", "memory_ids")
    )

    @field_validator("selected_ids", mode="before")
    @classmethod
    def _clean(cls, value: Any) -> Any:
        return clean_strings(value)


_REASONER_SYSTEM = """\
You choose which memories a personal assistant should use. You get the user's query and \
memories that a search returned for it, ranked by similarity (the ranking is often wrong).

Select every memory that helps answer the query or carry out the request: memories that \
state the answer, give needed context (the user's preferences, constraints, plans, the \
people and places involved), or that the reply should take into account. Leave out memories \
that only share a word with the query. Memories and query may be in different languages; \
judge by meaning.

List the selected ids, most useful first, copied exactly as given. Do not invent ids. If no \
memory helps, return an empty list.

Answer with one JSON object and nothing else, no markdown fences:
{"selected_ids": ["id", "..."]}"""


def render_reasoner(ctx: ReasonerContext) -> list[ChatMessage]:
    """The query and each candidate as ``[id] text``, in ranked order."""
    lines = [f"{n}. [{c.id}] {clip(c.text)}" for n, c in enumerate(ctx.candidates, 1)]
    body = (
        f"Query: {ctx.query.strip()}\n\nRetrieved memories (rank. [id] text):\n"
        + ("\n".join(lines) if lines else "(none)")
        + "\n\n"
        + JSON_ONLY_TAIL
    )
    return [
        {"role": "system", "content": _REASONER_SYSTEM},
        {"role": "user", "content": body},
    ]




REASONER: Task[ReasonerContext, ReasonerResponse] = Task(
    name="search.reasoner",
    render=render_reasoner,
    response=ReasonerResponse,
)

# A run of id characters that may be an abbreviated id ("3f2a9c1e…").
_ID_TOKEN = re.compile(r"[0-9A-Za-z][0-9A-Za-z_-]{7,}")
_MIN_PREFIX = 8
# An id mention must not be part of a longer id ("mem-1" inside "mem-10").
_EDGE_BEFORE = r"(?<![0-9A-Za-z_])(?<![0-9A-Za-z_]-)"
_EDGE_AFTER = r"(?![0-9A-Za-z_]|-[0-9A-Za-z])"


def fallback_ids_from_text(text: str, known_ids: Sequence[str]) -> list[str]:
    """Known ids mentioned in ``text``, in order of first mention, each once.

    Full ids match case-insensitively wherever they are not part of a longer id;
    a token of at least 8 characters that starts exactly one known id counts as
    that id (models shorten uuids).
    """
    if not text or not known_ids:
        return []
    known = [k for k in dict.fromkeys(known_ids) if k]
    first: dict[str, int] = {}
    spans: list[tuple[int, int]] = []
    for kid in known:
        pattern = re.compile(_EDGE_BEFORE + re.escape(kid) + _EDGE_AFTER, re.IGNORECASE)
        for match in pattern.finditer(text):
            first.setdefault(kid, match.start())
            spans.append(match.span())
    for match in _ID_TOKEN.finditer(text):
        if any(s <= match.start() < e for s, e in spans):
            continue
        token = match.group(0).lower().rstrip("-_")
        if len(token) < _MIN_PREFIX:
            continue
        owners = [k for k in known if k.lower().startswith(token)]
        if len(owners) == 1 and owners[0] not in first:
            first[owners[0]] = match.start()
    return sorted(first, key=first.__getitem__)
