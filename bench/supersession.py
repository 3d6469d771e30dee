"""Facts that change: an explicit change closes the older fact, a near-miss never does.

    python bench/supersession.py tests/data/supersession_pairs.jsonl [--pairs N] [--errors]
                                 [--plain FIELD=VALUE[,…]]   # recipe fields
    python bench/supersession.py tests/data/supersession_pairs.jsonl --pairs 20   # quick

Each labelled pair (an earlier and a later statement of the user, said on different days;
``kind`` "change" when the later one ends or replaces the earlier, else the near-miss it is:
a plan, a trip, another person, another time, a hypothetical, another attribute) goes through
the real pipeline in a cube of its own, on the embedded stack (noida-db broker, FalkorDB,
Milvus Lite, a worker with the ``rules`` LLM and the local e5 embedder) started in a
temporary directory on free ports: every earlier statement as a user's chat message said at
its time, applied, then every later one, applied. Then, per pair:

- closing: was the earlier statement's memory closed (``valid_until`` set and a
  ``SUPERSEDES`` edge to it from a memory of the later statement), was that announced
  (``superseded`` on ``memory.updates``), and was anything else closed (an episode, the later
  statement; working-memory copies are not counted)? Precision over the pairs where the
  earlier memory was closed, recall over the change pairs.
- present tense: the pair's question, fast search at the default top_k. "Current first":
  a hit holding one of the current fact's answer terms (a fact or an episode) ranks above
  every hit holding only stale terms. Over the change pairs, and over the near-misses as a
  baseline (there the earlier fact is the current one and must stay first).

Baselines from the same run: the newest statement first (the same hits ranked by when their
statement was said, nothing else), and plain search without validity: by default the same
hits ordered by their score alone (what the reply exposes; it undoes a validity ranking
only if that reorders hits without changing their scores), or, with ``--plain``, every
question searched again with those fields of the search recipe changed (``topics/recipe.py``;
``--plain boosts.current_first=false``: validity's ranking off).
Figures per kind and per language; ``--errors`` lists each miss with the texts. Exits
non-zero only when the stack or the data cannot be set up.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from embedded import embedded_stack  # noqa: E402
from ingest import make_settings  # noqa: E402

from memstream.client.client import MemoryClient  # noqa: E402
from memstream.streams.worker import Worker  # noqa: E402
from memstream.topics.events import Message, ScoredMemory  # noqa: E402
from memstream.topics.models import CubeGraph, MemoryItem, parse_iso_time  # noqa: E402

DEFAULT_DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "supersession_pairs.jsonl"
SEARCHES_IN_FLIGHT = 4
Which = Literal["old", "new"]
BY_SCORE = "the reply's hits ordered by score alone"


@dataclass(frozen=True)
class Statement:
    text: str
    said_at: datetime


@dataclass(frozen=True)
class Pair:
    id: str
    lang: str
    kind: str
    old: Statement
    new: Statement
    question: str
    current: Which
    answer_terms: tuple[str, ...]
    stale_terms: tuple[str, ...]
    marker: str = ""

    @property
    def change(self) -> bool:
        return self.kind == "change"

    @property
    def cube(self) -> str:
        return f"sup-{self.id}"

    def message_id(self, which: Which) -> str:
        return f"{self.id}-{which}"


def load_pairs(path: Path) -> list[Pair]:
    """The labelled pairs; a malformed line ends the run (a setup failure)."""
    pairs = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
            old, new = (Statement(r[w]["text"], parse_iso_time(r[w]["said_at"],
                                                               naive_as_utc=False))
                        for w in ("old", "new"))
            pairs.append(Pair(r["id"], r["lang"], r["kind"], old, new, r["question"],
                              r["current"], tuple(r["answer_terms"]), tuple(r["stale_terms"]),
                              r.get("marker", "")))
        except (KeyError, TypeError, ValueError) as exc:
            raise SystemExit(f"{path}:{number}: not a supersession pair ({exc!r})") from exc
    return pairs


def spread(pairs: list[Pair], n: int | None) -> list[Pair]:
    """``n`` pairs spaced evenly through the file (every kind and language in a quick run)."""
    if n is None or n >= len(pairs):
        return pairs
    return [pairs[i * len(pairs) // n] for i in range(n)]


# --------------------------------------------------------------------------- one pair


def origin(item: MemoryItem, pair: Pair) -> Which | None:
    """Which statement a memory (fact, episode or working-memory copy) came from."""
    ids = {ref.message_id for ref in item.metadata.sources}
    if pair.message_id("new") in ids:
        return "new"
    return "old" if pair.message_id("old") in ids else None


def holds(text: str, terms: Sequence[str]) -> bool:
    low = text.lower()
    return any(t.lower() in low for t in terms)


def hit_class(item: MemoryItem, pair: Pair) -> Literal["current", "stale", "other"]:
    if holds(item.memory, pair.answer_terms):
        return "current"
    return "stale" if holds(item.memory, pair.stale_terms) else "other"


def current_first(items: Sequence[MemoryItem], pair: Pair) -> bool:
    """A hit with an answer term comes before every hit with only stale terms."""
    for item in items:
        match hit_class(item, pair):
            case "current":
                return True
            case "stale":
                return False
    return False


@dataclass
class Outcome:
    pair: Pair
    closed: bool = False  # the earlier statement's memory: valid_until and SUPERSEDES from new
    announced: bool = False
    until_in_range: bool = False  # valid_until after the earlier statement, not after the later
    half_closed: list[str] = field(default_factory=list)  # valid_until without edge, or back
    else_closed: list[str] = field(default_factory=list)
    merged: list[str] = field(default_factory=list)  # MERGED_TO: one statement merged away
    first: bool = False  # memstream's reply
    newest_first: bool = False
    plain_first: bool = False
    plain_is_reply: bool = True
    stale_returned: bool = False
    stale_marked: bool = False  # a stale hit returned carries its valid_until
    hits: list[str] = field(default_factory=list)


def judge_closing(out: Outcome, graph: CubeGraph, superseded: set[tuple[str, str]]) -> None:
    pair = out.pair
    nodes = {n.id: n for n in graph.nodes if n.metadata.memory_type != "WorkingMemory"}
    edges = [e for e in graph.edges if e.type == "SUPERSEDES"]
    for node in nodes.values():
        which = origin(node, pair)
        until = node.metadata.valid_until
        from_new = [e.source for e in edges if e.target == node.id
                    and e.source in nodes and origin(nodes[e.source], pair) == "new"]
        if which == "old" and node.metadata.memory_type != "EpisodicMemory" \
                and until is not None and from_new:
            out.closed = True
            out.announced |= any((node.id, s) in superseded for s in from_new)
            out.until_in_range |= pair.old.said_at < until <= pair.new.said_at
        elif until is not None or any(e.target == node.id for e in edges):
            what = f"{node.metadata.memory_type} of the {which or 'no'} statement: {node.memory!r}"
            if which == "old" and node.metadata.memory_type != "EpisodicMemory":
                out.half_closed.append(("valid_until without a SUPERSEDES edge from the new "
                                        "statement" if until else "SUPERSEDES edge without "
                                        "valid_until") + f": {what}")
            else:
                out.else_closed.append(what)
    for edge in graph.edges:
        if edge.type == "MERGED_TO" and edge.source in nodes and edge.target in nodes:
            out.merged.append(f"{nodes[edge.source].memory!r} into {nodes[edge.target].memory!r}"
                              f" ({edge.reason})")


def judge_ranking(out: Outcome, reply: list[ScoredMemory],
                  plain: list[ScoredMemory] | None) -> None:
    pair = out.pair
    items = [h.item for h in reply]
    out.first = current_first(items, pair)
    age: dict[Which | None, int] = {"new": 0, "old": 1, None: 2}  # newest said first
    out.newest_first = current_first(sorted(items, key=lambda i: age[origin(i, pair)]), pair)
    by_score = [h.item for h in sorted(reply, key=lambda h: -h.score)] if plain is None \
        else [h.item for h in plain]
    out.plain_first = current_first(by_score, pair)
    out.plain_is_reply = [i.id for i in by_score] == [i.id for i in items]
    stale = [i for i in items if hit_class(i, pair) == "stale"]
    out.stale_returned = bool(stale)
    out.stale_marked = any(i.metadata.valid_until is not None for i in stale)
    out.hits = [f"{h.score:.3f} {hit_class(h.item, pair):<7} {h.item.id[:8]} "
                f"{h.item.metadata.memory_type} "
                f"{'closed ' if h.item.metadata.valid_until else ''}{h.item.memory!r}"
                for h in reply]


# --------------------------------------------------------------------------- the run


async def publish_all(client: MemoryClient, pairs: Sequence[Pair], which: Which) -> float:
    """Each pair's ``which`` statement as a user's chat message; waits until all are applied."""
    t0 = time.perf_counter()
    tokens = []
    for pair in pairs:
        said = pair.old if which == "old" else pair.new
        message = Message(id=pair.message_id(which), role="user", content=said.text,
                          timestamp=said.said_at)
        tokens.append(await client.add_messages(pair.cube, [message]))
    for token in tokens:
        await client.wait_applied(token, timeout=600)
    return time.perf_counter() - t0


async def search_all(client: MemoryClient, pairs: Sequence[Pair]) -> list[list[ScoredMemory]]:
    gate = asyncio.Semaphore(SEARCHES_IN_FLIGHT)

    async def one(pair: Pair) -> list[ScoredMemory]:
        async with gate:
            return await client.search(pair.cube, pair.question, mode="fast")

    found: list[list[ScoredMemory]] = await asyncio.gather(*(one(p) for p in pairs))
    return found


async def run(pairs: list[Pair], plain_changes: dict[str, Any] | None) -> list[Outcome]:
    logging.basicConfig(level=logging.WARNING)
    started = time.perf_counter()
    async with embedded_stack(prefix="memstream-supersession-") as (data, stack):
        b, g = stack.bootstrap, stack.graph_uri
        settings = make_settings(data, "sup", b, g, llm={"provider": "rules"})
        async with Worker(settings, b, g) as worker, MemoryClient(settings, b) as client:
            print(f"embedded stack in {data}: kafka {b}, graph {g}; {len(pairs)} pairs, "
                  f"rules mode", flush=True)
            superseded: set[tuple[str, str]] = set()

            async def follow() -> None:
                async for update in client.updates():
                    if update.action == "superseded" and update.node_id is not None:
                        superseded.update((update.node_id, r) for r in update.related_ids)

            follower = asyncio.create_task(follow())
            await asyncio.sleep(1.0)  # the follower reads from the end: positioned first
            up = time.perf_counter() - started
            old_s = await publish_all(client, pairs, "old")
            new_s = await publish_all(client, pairs, "new")
            await asyncio.sleep(1.0)  # announcements of the last batch reach the follower
            follower.cancel()
            t0 = time.perf_counter()
            assert worker.deps is not None  # noqa: S101 - a started worker has them
            graphs = [await worker.deps.query.export_cube(p.cube) for p in pairs]
            replies = await search_all(client, pairs)
            plain: list[list[ScoredMemory]] | list[None] = [None] * len(pairs)
            if plain_changes is not None:
                default = worker.deps.settings.search
                changed = default.with_overrides(plain_changes)
                worker.deps.settings = worker.deps.settings.model_copy(update={"search": changed})
                plain = await search_all(client, pairs)
                worker.deps.settings = worker.deps.settings.model_copy(update={"search": default})
            checked = time.perf_counter() - t0
    outcomes = []
    for pair, graph, reply, flat in zip(pairs, graphs, replies, plain, strict=True):
        out = Outcome(pair)
        judge_closing(out, graph, superseded)
        judge_ranking(out, reply, flat)
        outcomes.append(out)
    total = time.perf_counter() - started
    print(f"stack and worker up {up:.1f}s; earlier statements applied in {old_s:.1f}s, later "
          f"ones in {new_s:.1f}s; stores read and {len(pairs)} questions searched in "
          f"{checked:.1f}s; {total:.1f}s in all")
    return outcomes


# --------------------------------------------------------------------------- report


def ratio(part: int, whole: int) -> str:
    return f"{part / whole:.3f} ({part}/{whole})" if whole else f"– (0/{whole})"


def count(outs: Sequence[Outcome], test: Callable[[Outcome], bool]) -> int:
    return sum(1 for o in outs if test(o))


def report(outs: list[Outcome], plain_label: str) -> None:
    change = [o for o in outs if o.pair.change]
    near = [o for o in outs if not o.pair.change]
    closed = [o for o in outs if o.closed]
    right = count(closed, lambda o: o.pair.change)
    print(f"\n=== closing (rules mode, through the pipeline): {len(change)} change pairs, "
          f"{len(near)} near-misses ===")
    precision = ratio(right, len(closed)) if closed else "undefined (nothing was closed)"
    print(f"  precision   {precision}")
    print(f"  recall      {ratio(right, len(change))} of the change pairs")
    print(f"  near-misses that closed the earlier fact: {ratio(len(closed) - right, len(near))}"
          " (goal 0)")
    strays = sum(len(o.else_closed) for o in outs)
    print(f"  anything else closed: {strays} memories in "
          f"{count(outs, lambda o: bool(o.else_closed))} pairs (goal 0); half-closed "
          f"(valid_until without the edge, or the edge without valid_until): "
          f"{sum(len(o.half_closed) for o in outs)}")
    print(f"  the two statements merged instead (MERGED_TO, one archived): "
          f"{count(change, lambda o: bool(o.merged))} change pairs, "
          f"{count(near, lambda o: bool(o.merged))} near-misses")
    print(f"  closings announced as superseded on memory.updates: "
          f"{ratio(count(closed, lambda o: o.announced), len(closed))}; valid_until after the "
          f"earlier statement and not after the later: "
          f"{ratio(count(closed, lambda o: o.until_in_range), len(closed))}")

    print("\n=== present tense: current fact first (a hit with an answer term above every hit "
          "with only stale terms; fast search, default top_k) ===")
    print(f"  plain search: {plain_label}")
    print(f"  {'pairs':<34}{'memstream':>17}{'newest said first':>20}{'plain search':>22}")
    for label, chosen in (("change (the later fact)", change),
                          ("near-miss (the earlier fact)", near), ("all", outs)):
        print(f"  {label:<34}{ratio(count(chosen, lambda o: o.first), len(chosen)):>17}"
              f"{ratio(count(chosen, lambda o: o.newest_first), len(chosen)):>20}"
              f"{ratio(count(chosen, lambda o: o.plain_first), len(chosen)):>22}")
    print(f"  change pairs whose stale fact is still returned: "
          f"{ratio(count(change, lambda o: o.stale_returned), len(change))}, carrying its "
          f"valid_until: {count(change, lambda o: o.stale_marked)}")
    same = count(outs, lambda o: o.plain_is_reply)
    print(f"  plain ranking = memstream's reply order in {same}/{len(outs)} searches"
          + (" (the reply exposes no ranking without validity: the baseline equals memstream)"
             if same == len(outs) and plain_label == BY_SCORE else ""))

    print(f"\n{'group':<26}{'n':>4}{'closed':>8}{'announced':>11}{'else closed':>13}"
          f"{'merged':>8}{'first':>7}{'newest':>8}{'plain':>7}")
    kinds = sorted({o.pair.kind for o in outs}, key=lambda k: (k != "change", k))
    groups = [*(f"kind {k}" for k in kinds),
              *(f"lang {x}" for x in sorted({o.pair.lang for o in outs}))]
    for group in groups:
        field_, value = group.split(" ", 1)
        g = [o for o in outs if (o.pair.kind if field_ == "kind" else o.pair.lang) == value]
        print(f"{group:<26}{len(g):>4}{count(g, lambda o: o.closed):>8}"
              f"{count(g, lambda o: o.announced):>11}{count(g, lambda o: bool(o.else_closed)):>13}"
              f"{count(g, lambda o: bool(o.merged)):>8}"
              f"{count(g, lambda o: o.first):>7}{count(g, lambda o: o.newest_first):>8}"
              f"{count(g, lambda o: o.plain_first):>7}")
    for lang in sorted({o.pair.lang for o in change}):
        g = [o for o in change if o.pair.lang == lang]
        print(f"  change pairs, {lang}: recall {ratio(count(g, lambda o: o.closed), len(g))}")


def errors(outs: list[Outcome]) -> None:
    print("\n=== misses ===")
    for o in outs:
        p = o.pair
        wrong = []
        if p.change and not o.closed:
            wrong.append("earlier fact not closed")
        if not p.change and o.closed:
            wrong.append("near-miss closed the earlier fact")
        if o.closed and not o.announced:
            wrong.append("closing not announced")
        wrong += [f"also closed: {w}" for w in o.else_closed]
        wrong += [f"merged: {w}" for w in o.merged]
        wrong += [f"half-closed: {w}" for w in o.half_closed]
        if not o.first:
            wrong.append(f"{p.current} fact not first for {p.question!r}")
        if not wrong:
            continue
        print(f"\n  {p.id} [{p.kind}{', ' + p.marker if p.marker else ''}]")
        print(f"    old {p.old.said_at.isoformat()}: {p.old.text}")
        print(f"    new {p.new.said_at.isoformat()}: {p.new.text}")
        for w in wrong:
            print(f"    - {w}")
        if not o.first:
            print("    hits: " + ("\n          ".join(o.hits) or "none"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("labels", nargs="?", type=Path, default=DEFAULT_DATA,
                        metavar="LABELS", help="the labelled pairs (JSON lines)")
    parser.add_argument("--pairs", type=int, help="this many pairs, spread through the file")
    parser.add_argument("--errors", action="store_true", help="list each miss with its texts")
    parser.add_argument("--plain", metavar="FIELD=VALUE[,…]",
                        help="recipe fields without validity, for the plain baseline, e.g. "
                             "boosts.current_first=false "
                             "(default: the reply's hits ordered by score)")
    args = parser.parse_args()
    pairs = spread(load_pairs(args.labels), args.pairs)
    if not pairs:
        raise SystemExit(f"{args.labels}: no pairs")
    changes = None if args.plain is None else dict(
        kv.split("=", 1) for kv in args.plain.split(",") if "=" in kv)
    print(f"{len(pairs)} pairs from {args.labels}")
    outs = asyncio.run(run(pairs, changes))
    report(outs, BY_SCORE if changes is None else f"searched again with {args.plain}")
    if args.errors:
        errors(outs)


if __name__ == "__main__":
    main()
