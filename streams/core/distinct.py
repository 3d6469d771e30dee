"""Distinct evidence in a reply: every turn returned once, in as few hits as it takes.

A caller reads a reply within a budget (a prompt's context, ``top_k`` places): a hit that
returns turns an earlier hit returned costs characters and a place for nothing, and every
caller would have to find and drop it. So the search does, in reply order:

- an excerpt sharing turns with an earlier excerpt (another cube holds the same turns) is
  merged into it: one excerpt, the union of their turns in turn order, the better place
  and score;
- a statement whose source turns an earlier excerpt (or whole episode) returns is folded
  into that hit: its id in ``folded_ids``, its words already in the excerpt; a statement
  ranked above the excerpt holding its turns takes the excerpt into its own place, and is
  its ``item``;
- a hit whose every turn was returned before is dropped.

Excerpts that touch without sharing a turn are joined where the turns' order is known
(``turn_ranking``, within a cube; there the first hits stay short, see ``_windows``). A
statement returns its own words, not its turn's: two statements of one turn are two facts,
and both stay.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from memstream.topics.events import ScoredMemory
from memstream.topics.models import MemoryItem


def source_turns(item: MemoryItem) -> tuple[str, ...]:
    """The message ids a memory came from, in order."""
    return tuple(dict.fromkeys(s.message_id for s in item.metadata.sources
                               if s.kind == "message" and s.message_id))


def text_turns(hit: ScoredMemory) -> tuple[str, ...]:
    """The turns whose words a hit returns, in order: its excerpt's, or a whole episode's."""
    if hit.excerpt is not None:
        return hit.excerpt_ids
    if hit.item.metadata.memory_type == "EpisodicMemory":
        return source_turns(hit.item)
    return ()


def _is_statement(item: MemoryItem) -> bool:
    return item.metadata.memory_type != "EpisodicMemory"


@dataclass(eq=False)  # entries are told apart by identity (list.index, remove)
class _Entry:
    """A hit of the reply being built, and what was folded into it."""

    hit: ScoredMemory
    turns: tuple[str, ...]  # text_turns(hit)
    folded: list[str] = field(default_factory=list)

    def fold(self, item_id: str) -> None:
        if item_id != self.hit.item.id and item_id not in self.folded:
            self.folded.append(item_id)

    def build(self) -> ScoredMemory:
        folded = tuple(dict.fromkeys([*self.hit.folded_ids, *self.folded]))
        return self.hit.model_copy(update={"folded_ids": folded}) if folded != \
            self.hit.folded_ids else self.hit


def union_excerpt(first: ScoredMemory, second: ScoredMemory) -> tuple[str, tuple[str, ...]] | None:
    """The excerpt and turn ids of two excerpts of one run of turns that share some: the
    second's turns before the shared ones, the first's, the second's after them. None when
    they cannot be aligned (a line without its message id, or turns in another order)."""
    if first.excerpt is None or second.excerpt is None:
        return None
    a_lines, b_lines = first.excerpt.split("\n"), second.excerpt.split("\n")
    a_ids, b_ids = first.excerpt_ids, second.excerpt_ids
    if len(a_lines) != len(a_ids) or len(b_lines) != len(b_ids):
        return None
    shared = [i for i, m in enumerate(b_ids) if m in set(a_ids)]
    if not shared:
        return None
    lo, hi = shared[0], shared[-1]
    if hi - lo + 1 != len(shared) or [b_ids[i] for i in shared] != \
            [m for m in a_ids if m in set(b_ids)]:
        return None  # a turn of one inside the other's run, or another order
    a_at = {m: i for i, m in enumerate(a_ids)}
    if (lo > 0 and a_at[b_ids[lo]] != 0) or (hi < len(b_ids) - 1
                                            and a_at[b_ids[hi]] != len(a_ids) - 1):
        return None  # the second runs on past a turn the first holds in its middle
    lines = [*b_lines[:lo], *a_lines, *b_lines[hi + 1:]]
    return "\n".join(lines), (*b_ids[:lo], *a_ids, *b_ids[hi + 1:])


def distinct(hits: Sequence[ScoredMemory]) -> list[ScoredMemory]:
    """``hits`` (best first) with every turn returned once: see the module's docstring."""
    out: list[_Entry] = []
    for hit in hits:
        turns = text_turns(hit)
        returned = {t for e in out for t in e.turns}
        if not turns:
            said = set(source_turns(hit.item))
            if said and said <= returned and _is_statement(hit.item):
                next(e for e in out if said & set(e.turns)).fold(hit.item.id)
            else:
                out.append(_Entry(hit, ()))
            continue
        holders = [e for e in out if set(e.turns) & set(turns)]
        if set(turns) <= returned:
            if _is_statement(hit.item):
                holders[0].fold(hit.item.id)
            continue
        entry = _Entry(hit, turns)
        target: _Entry | None = None
        for holder in holders:  # earlier excerpts of the same turns: one excerpt
            if target is None:
                if _absorb(holder, entry):
                    target = holder
            elif _absorb(target, holder):
                out.remove(holder)
        if target is None:
            out.append(entry)
        if hit.excerpt is not None:
            _take_earlier_statements(out, target or entry)
    return [e.build() for e in out]


def _absorb(into: _Entry, other: _Entry) -> bool:
    """Merge ``other``'s excerpt into ``into``'s (which keeps its item and place), when the
    two can be aligned; whether they were."""
    merged = union_excerpt(into.hit, other.hit)
    if merged is None:
        return False
    excerpt, ids = merged
    into.hit = into.hit.model_copy(update={
        "excerpt": excerpt, "excerpt_ids": ids, "score": max(into.hit.score, other.hit.score)})
    into.turns = ids
    if _is_statement(other.hit.item):
        into.fold(other.hit.item.id)
    for item_id in (*other.hit.folded_ids, *other.folded):
        into.fold(item_id)
    return True


def _take_earlier_statements(out: list[_Entry], entry: _Entry) -> None:
    """Statements placed above ``entry`` whose turns it returns: the first of them becomes
    its item and gives it its place and score, the others are folded into it."""
    held = set(entry.turns)
    above = [e for e in out[: out.index(entry)]
             if not e.turns and _is_statement(e.hit.item)
             and (said := source_turns(e.hit.item)) and set(said) <= held]
    if not above:
        return
    first = above[0]
    own = entry.hit.item
    entry.hit = entry.hit.model_copy(update={
        "item": first.hit.item, "score": max(first.hit.score, entry.hit.score)})
    if _is_statement(own):
        entry.fold(own.id)
    for e in above:
        entry.fold(e.hit.item.id)
        entry.folded.extend(f for f in e.hit.folded_ids if f not in entry.folded)
    entry.folded = [f for f in entry.folded if f != first.hit.item.id]
    out.remove(entry)
    out[out.index(first)] = entry
    for e in above[1:]:
        out.remove(e)
