"""The context block: search hits rendered as text for a prompt, within a budget.

One renderer for what an agent reads: ``MemoryClient.context()`` (and through it the CLI,
the MCP tool and the LangGraph store) and the scheduler's activation-memory block. It lives
in the contract because both sides build it: the client from a search reply, the worker
from working memory. Pure: hits in, text out.

Each hit is one entry, most relevant first, opening with ``#`` and the memory's short id::

    #3f2a9c10 2023-05-07: Caroline attended an LGBTQ support group.
    [2023-05-08 13:56] Caroline: I went to a LGBTQ support group yesterday …
    [13:57] Melanie: Wow, that's great!
    #81c0d2aa
    [2023-06-01 09:12] Caroline: …
    #e1f2a3b4 2023-03-01, held until 2023-06-01: I live in Berlin.
    (3 more memories did not fit)

A statement is shown with its date (when it happened, else since when it holds) and, once it
stopped holding, until when; its excerpt (the turns it came from, each line with its time
and speaker, as the search returns it) follows. A statement whose words the excerpt already
holds is not written again (a bracketed part of it, a date the ``rules`` extraction resolved,
is read from the excerpt's times); statements folded into a hit are not repeated either.

**Budget.** The whole text, header and last line included, is at most ``budget``
characters (or estimated tokens, ``estimate_tokens``). Hits are taken in rank order while
their entries fit and the first that does not fit ends the block — the accounting of the
retrieval bench's B1000/B2000 (``bench/retrieval_quality.py``), so a block at 2,000
characters holds the hits B2000 credits whenever its entries and last line cost no more than
the hits' text (an entry costs 10 characters for its id, and a statement its excerpt holds
nothing: docs/python-client.md says when that is). When not even the first hit fits,
it is cut to fit rather than leaving the block empty: its statement alone, or its first
lines, cut at a word (or, in text without spaces, a character) and marked ``…``.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict

from memstream.topics.events import MAX_TOP_K, ScoredMemory
from memstream.topics.models import MemoryItem

Unit = Literal["chars", "tokens"]

ID_CHARS = 8  # the prefix the CLI and the MCP tools resolve (memstream/history/ids.py)
NOTHING_FOUND = "No memories found."
ACTIVATION_HEADER = "Known about the user:"  # opens the activation-memory block
DEFAULT_BUDGET = 2000
ELLIPSIS = "…"

# "[2023-05-08 13:56] " or "[13:56] ": a turn's time at the head of its line
_TURN_TIME = re.compile(r"^\[(?:\d{4}-\d\d-\d\d )?\d\d:\d\d\] ")
_BRACKETED = re.compile(r"\[[^\]\n]*\]")
_WORD = re.compile(r"\w+")


class ContextEntry(BaseModel):
    """One hit as the block shows it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str  # the memory's full id (a working-memory copy's: the memory it copies)
    text: str
    message_ids: tuple[str, ...] = ()  # the turns whose words the entry shows
    folded_ids: tuple[str, ...] = ()  # statements whose words its excerpt holds
    cut: bool = False  # shortened to fit (only ever the first entry)


class ContextBlock(BaseModel):
    """The block and what it holds: ``text`` for the prompt, the ids for feedback."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str
    entries: tuple[ContextEntry, ...] = ()
    left_out: int = 0  # hits that did not fit
    budget: int
    unit: Unit = "chars"
    used: int = 0  # the text's cost, in ``unit``

    @property
    def ids(self) -> tuple[str, ...]:
        """The full ids of the memories shown, in the block's order."""
        return tuple(e.id for e in self.entries)


# ------------------------------------------------------------------------------ tokens

def _wide(ch: str) -> bool:
    return unicodedata.east_asian_width(ch) in ("W", "F")


_PIECE = re.compile(r"[A-Za-z0-9]+|\s+|.", re.DOTALL)


def estimate_tokens(text: str) -> int:
    """Tokens a model's tokenizer is likely to need for ``text``, erring high (no tokenizer
    ships with memstream, and none may be downloaded at run time): an ASCII word 1 token per
    5 letters begun, a number 1 per 3 digits begun, letters and digits mixed (an id) 1 per
    character, a CJK or other wide character 1.5, a character outside the BMP (an emoji) 3, a
    line break 1, any other character 1; spaces are free (tokenizers fold them into the next
    word). Measured against OpenAI's cl100k_base, over blocks of 15 texts: LoCoMo's English
    turns (with their times) count 0.86 of the estimate on average and 0.90 at most, the
    Chinese sentences of memstream's tests 0.84 and 0.88; a single short text can count more
    (a line of rare characters up to 1.3 times)."""
    return math.ceil(_halves(text) / 2)


def _halves(text: str) -> int:
    """``estimate_tokens`` in half tokens, before rounding up: additive over lines (a line
    break is a piece of its own), so a block's cost is its entries' plus the breaks'."""
    halves = 0
    for m in _PIECE.finditer(text):
        piece = m.group()
        if piece.isspace():
            halves += 2 * piece.count("\n")
        elif piece.isascii() and piece.isalpha():
            halves += 2 * (1 + (len(piece) - 1) // 5)
        elif piece.isascii() and piece.isdigit():
            halves += 2 * math.ceil(len(piece) / 3)
        elif piece.isascii() and piece.isalnum():
            halves += 2 * len(piece)
        elif ord(piece) > 0xFFFF:
            halves += 6
        elif _wide(piece):
            halves += 3
        else:
            halves += 2
    return halves


def cost(text: str, unit: Unit) -> int:
    """What ``text`` costs of a budget in ``unit``."""
    return len(text) if unit == "chars" else estimate_tokens(text)


# ------------------------------------------------------------------------------ entries

def _short(ids: Sequence[str]) -> int:
    """The prefix length (at least ``ID_CHARS``) that tells these ids apart."""
    length = ID_CHARS
    while length < max((len(i) for i in ids), default=0) and \
            len({i[:length] for i in set(ids)}) < len(set(ids)):
        length += 1
    return length


def _id_of(item: MemoryItem) -> str:
    return item.metadata.origin_id or item.id


def _is_turns(text: str) -> bool:
    """Whether a memory's text is turns as said (an episode, or its working-memory copy):
    every line opens with its time."""
    return all(_TURN_TIME.match(line) for line in text.split("\n"))


_TIME = re.compile(r"^\[(\S+) ([^\]\n]*)\]")


def once_dated(lines: Sequence[str]) -> list[str]:
    """Turns' lines, the date of each ``[date time]`` shown only where it differs from the
    line before (``[time]`` alone after it): a session's turns share their date, and a
    budget then holds more of their words. The search's excerpts come so; an episode's
    text is made so here."""
    out, last = [], None
    for line in lines:
        found = _TIME.match(line)
        day = found.group(1) if found else None
        out.append(f"[{found.group(2)}]{line[found.end():]}" if found and day == last else line)
        last = day
    return out


def _flat(text: str) -> str:
    return " ".join(text.split())


def _said_in(statement: str, excerpt: str) -> bool:
    """Whether every word of ``statement`` (outside brackets) is already in ``excerpt``: the
    statement is then the excerpt's words again, and not written twice."""
    words = _WORD.findall(_BRACKETED.sub(" ", statement).casefold())
    if not words:
        return True
    folded = excerpt.casefold()
    have = set(_WORD.findall(folded))
    # a run of CJK characters is one \w+ run: found inside the excerpt's, not as a whole
    return all(w in have if w.isascii() else w in folded for w in words)


def _source_turns(item: MemoryItem) -> tuple[str, ...]:
    return tuple(dict.fromkeys(s.message_id for s in item.metadata.sources
                               if s.kind == "message" and s.message_id))


def _date(item: MemoryItem) -> str:
    md = item.metadata
    when = md.memory_time or md.valid_from
    return f"{when:%Y-%m-%d}" if when is not None else ""


def _held(item: MemoryItem, short: int) -> str:
    md = item.metadata
    if md.valid_until is None:
        return ""
    by = f" (replaced by #{md.superseded_by[:short]})" if md.superseded_by else ""
    return f"held until {md.valid_until:%Y-%m-%d}{by}"


@dataclass(frozen=True)
class _Hit:
    """A hit taken apart: its header, its statement (none for turns as said) and whether
    the entry writes it, its lines of turns with each line's message ids."""

    id: str
    head: str  # "#3f2a9c10 2023-05-07, held until 2023-06-01"
    statement: str
    statement_ids: tuple[str, ...]
    show_statement: bool
    lines: tuple[str, ...]
    line_ids: tuple[tuple[str, ...], ...]
    folded: tuple[str, ...]

    def whole(self) -> ContextEntry:
        first = self.head + (f": {self.statement}" if self.show_statement else "")
        ids = tuple(dict.fromkeys(m for ids in self.line_ids for m in ids)) if self.lines \
            else self.statement_ids
        return ContextEntry(id=self.id, text="\n".join([first, *self.lines]),
                            message_ids=ids, folded_ids=self.folded)

    def cut_to(self, room: int, unit: Unit) -> ContextEntry | None:
        """The entry shortened to cost at most ``room``: its statement alone (the fact it
        was found for; cut if it must be), else its first lines and the next one cut; None
        if not even a word fits."""
        if self.statement:
            head = self.head + ": "
            text = _cut(head, self.statement, room, unit)
            if text is None:
                return None
            whole = text == head + self.statement
            return ContextEntry(id=self.id, text=text, folded_ids=self.folded, cut=True,
                                message_ids=self.statement_ids if whole else ())
        kept, ids = self.head, list[str]()
        for line, line_ids in zip(self.lines, self.line_ids, strict=True):
            if cost(f"{kept}\n{line}", unit) <= room:
                kept, ids = f"{kept}\n{line}", [*ids, *line_ids]
                continue
            kept = _cut(kept + "\n", line, room, unit) or kept
            break
        if kept == self.head:
            return None
        return ContextEntry(id=self.id, text=kept, folded_ids=self.folded, cut=True,
                            message_ids=tuple(dict.fromkeys(ids)))


def _take_apart(hit: ScoredMemory | MemoryItem, short: int) -> _Hit:
    scored, item = (hit, hit.item) if isinstance(hit, ScoredMemory) else (None, hit)
    excerpt = scored.excerpt if scored is not None else None
    episode = item.metadata.memory_type == "EpisodicMemory" or _is_turns(item.memory)
    if excerpt is not None and scored is not None:
        turns, ids = excerpt, scored.excerpt_ids
    else:
        turns, ids = (item.memory if episode else ""), _source_turns(item)
    lines = tuple(once_dated(turns.split("\n"))) if turns else ()
    line_ids: tuple[tuple[str, ...], ...] = tuple((i,) for i in ids) \
        if len(ids) == len(lines) else (tuple(ids), *[()] * (len(lines) - 1)) if lines else ()
    statement = "" if episode else _flat(item.memory)
    show = bool(statement) and not (excerpt is not None and _said_in(statement, excerpt))
    # its date goes with the statement (an excerpt's lines carry their own times)
    label = ", ".join(p for p in (_date(item) if show else "", _held(item, short)) if p)
    folded = tuple(f for f in (scored.folded_ids if scored else ()) if f != _id_of(item))
    return _Hit(id=_id_of(item), head="#" + _id_of(item)[:short] + (f" {label}" if label else ""),
                statement=statement, statement_ids=_source_turns(item) if statement else (),
                show_statement=show, lines=lines, line_ids=line_ids, folded=folded)


def _boundary(text: str, end: int) -> int:
    """``end`` moved back so that no mark, joiner or variation selector is parted from
    the character it belongs to."""
    while 0 < end < len(text) and (unicodedata.combining(text[end])
                                   or unicodedata.category(text[end]) in ("Mn", "Me", "Cf")
                                   or text[end - 1] == "\u200d"):
        end -= 1
    return end


def _cut(head: str, text: str, room: int, unit: Unit) -> str | None:
    """``head`` and as much of ``text`` as fits in ``room`` (cut text ends with ``…``), or
    None when not even a character of it fits."""
    if cost(head + text, unit) <= room:
        return head + text
    lo, hi = 0, len(text)  # the longest prefix whose cut form fits
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if cost(head + text[:mid].rstrip() + ELLIPSIS, unit) <= room:
            lo = mid
        else:
            hi = mid - 1
    end = _boundary(text, lo)
    space = text.rfind(" ", 0, end + 1) if end < len(text) and not text[end].isspace() else end
    if space > end // 2:  # a word boundary that keeps at least half of what fits
        end = space
    kept = text[:end].rstrip()
    return head + kept + ELLIPSIS if kept else None


# ------------------------------------------------------------------------------ the block

# A hit costs a hundred characters or more (a statement ~60-100, an excerpt of a few turns
# 300-500; an estimated token is about four characters of English): asking for one hit per
# hundred leaves the block more hits than it holds, so it says how many did not fit.
CHARS_PER_HIT = 100
CHARS_PER_TOKEN = 4


def hits_for(budget: int, unit: Unit = "chars") -> int:
    """How many hits to ask a search for, to fill ``budget`` (at least 10, at most the
    search's limit): 20 for 2,000 characters, as many as the retrieval bench's B2000 reads."""
    chars = budget if unit == "chars" else budget * CHARS_PER_TOKEN
    return max(10, min(MAX_TOP_K, math.ceil(chars / CHARS_PER_HIT)))


def _more(n: int) -> str:
    return f"({n} more {'memory' if n == 1 else 'memories'} did not fit)"


def render_context(hits: Sequence[ScoredMemory | MemoryItem], budget: int = DEFAULT_BUDGET,
                   unit: Unit = "chars", *, header: str | None = None,
                   empty: str = NOTHING_FOUND) -> ContextBlock:
    """The block for ``hits`` (best first; a ``MemoryItem`` is a hit without an excerpt)
    within ``budget`` (see the module's docstring); ``header`` opens it, ``empty`` is the
    text when there are no hits."""
    if budget < 1:
        raise ValueError("budget must be at least 1")
    if not hits:
        text = empty if cost(empty, unit) <= budget else ""
        return ContextBlock(text=text, budget=budget, unit=unit, used=cost(text, unit))
    short = _short([_id_of(h.item if isinstance(h, ScoredMemory) else h) for h in hits])
    opening = [header] if header else []
    entries: list[ContextEntry] = []

    def text_of(shown: Sequence[ContextEntry], left: int) -> str:
        return "\n".join([*opening, *(e.text for e in shown), *([_more(left)] if left else [])])

    # measured as it grows (characters, or half tokens: both add up over lines)
    measure = len if unit == "chars" else _halves
    limit, line_break = (budget, 1) if unit == "chars" else (2 * budget, 2)
    used, lines = (measure(header), 1) if header else (0, 0)
    for n, hit in enumerate(hits):
        entry = _take_apart(hit, short).whole()
        grown = used + (line_break if lines else 0) + measure(entry.text)
        left = len(hits) - n - 1
        if grown + (line_break + measure(_more(left)) if left else 0) <= limit:
            entries.append(entry)
            used, lines = grown, lines + 1
            continue
        if not entries:  # not even the first: cut it to fit rather than show nothing
            entries += _first_cut(_take_apart(hit, short), budget, unit,
                                  lambda e: text_of(e, len(hits) - 1))
        break
    left = len(hits) - len(entries)
    text = text_of(entries, left)
    if cost(text, unit) > budget:  # nothing shown, and the header or last line too long
        text = ""
    return ContextBlock(text=text, entries=tuple(entries), left_out=left, budget=budget,
                        unit=unit, used=cost(text, unit))


def _first_cut(parts: _Hit, budget: int, unit: Unit,
               text_of: Callable[[Sequence[ContextEntry]], str]) -> list[ContextEntry]:
    """The first hit cut to fit beside the rest of the block (``[]`` if it cannot)."""
    rest = text_of([])
    room = budget - cost(rest, unit) - (1 if rest else 0)  # the line break after it
    while room > 0:
        cut = parts.cut_to(room, unit)
        if cut is None:
            return []
        if cost(text_of([cut]), unit) <= budget:
            return [cut]
        room -= 1  # an estimate of tokens does not add up exactly across a line break
    return []
