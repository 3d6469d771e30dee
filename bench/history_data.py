"""The history of bench/history.py: generated chats, the log records they leave, their dumps.

No copied data. Conversations of 400 turns between two speakers (one cube each), sessions of
20 turns, chunks of 5 turns into both speakers' cubes. Each turn's text is one of a pool of
generated sentences (``pool_sentences``), picked by the turn's number, so any range of turns
is generated alike whichever run or step asks for it. For each chunk and cube the pipeline's
records are built as a worker would have left them: the conversation chunk, three extracted
memories a turn (what was said, as a fact about the speaker, and the moment; the LoCoMo dev
split gave 5.6 memories a turn over its two cubes) with their ``added`` updates, and one
``linked`` update with the chunk's FOLLOWS edges. Values are sealed with the data dir's keys,
as under ``memstream up``.

The same memories are what the stores hold: ``dump_of`` writes them as a ``memstream dump``
file (nodes, edges, vectors) that ``memstream load`` puts into the stores through the worker.
A node's vector is its sentence's vector, embedded once (local e5 model, as a passage) and
reused by every node that tells that sentence, under that node's own id: search and write
latency depend on how many vectors a store holds, not on what they say.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from memstream.topics.events import ConversationChunk, ExtractedMemory, MemoryUpdate, Message
from memstream.topics.models import CubeGraph, Edge, MemoryItem, MemoryMetadata
from memstream.topics.registry import CONVERSATIONS, MEMORY_ITEMS, MEMORY_UPDATES, TopicSpec

CHUNK = 5
SESSION = 20
CONVERSATION = 400
T0 = datetime(2025, 1, 1, tzinfo=UTC)

NAMES = ["Ana", "Bruno", "Chen", "Dara", "Elif", "Farid", "Greta", "Hiro", "Ines", "Jonas",
         "Kemi", "Lena", "Mateo", "Nadia", "Omar", "Priya", "Quinn", "Rosa", "Sami", "Tomas"]
PLACES = ["Lisbon", "Berlin", "Osaka", "Lagos", "Quito", "Tartu", "Porto", "Austin", "Pune"]
THINGS = ["the cello", "bouldering", "sourdough", "a vegetable garden", "chess", "pottery",
          "trail running", "Spanish lessons", "a book club", "woodworking", "birdwatching"]
PEOPLE = ["my sister", "my neighbour", "an old friend", "my manager", "my son", "my aunt"]
LINES = [
    "I started {thing} last {when} and I'm hooked.",
    "We drove to {place} with {person} over the weekend.",
    "Honestly {thing} is the only thing that calms me down after work.",
    "{person} is moving to {place} next month, I'll miss them.",
    "Did you ever try {thing}? I signed up for a class in {place}.",
    "I had a rough week, {person} helped me a lot.",
    "My plan for {when} is to finally get better at {thing}.",
    "The trip to {place} was amazing, we ate so well.",
]
WHEN = ["week", "month", "spring", "summer", "winter", "year"]
QUESTIONS = ["What did {name} say about {thing}?", "Who went to {place} with {name}?",
             "What are {name}'s plans for the {when}?", "How does {name} relax after work?",
             "Which class did {name} sign up for in {place}?"]

Record = tuple[TopicSpec, bytes, bytes]  # spec, key, value


def pool_sentences(size: int, seed: int) -> list[str]:
    """``size`` distinct generated sentences (fewer if the templates cannot give as many)."""
    rng = random.Random(seed)
    seen: dict[str, None] = {}
    for _ in range(size * 50):
        if len(seen) >= size:
            break
        seen[rng.choice(LINES).format(thing=rng.choice(THINGS), place=rng.choice(PLACES),
                                      person=rng.choice(PEOPLE), when=rng.choice(WHEN))] = None
    return list(seen)


def question(rng: random.Random, name: str) -> str:
    return rng.choice(QUESTIONS).format(name=name, thing=rng.choice(THINGS),
                                        place=rng.choice(PLACES), when=rng.choice(WHEN))


def speakers(conv: int) -> tuple[str, str]:
    return NAMES[conv % len(NAMES)], NAMES[(conv * 7 + 3) % len(NAMES)]


def cube_of(prefix: str, conv: int, name: str) -> str:
    return f"{prefix}-{conv:05d}-{name.lower()}"


def history_cubes(turns: int, prefix: str = "hist") -> list[str]:
    """The cubes the first ``turns`` turns of history went into."""
    return [cube_of(prefix, conv, name) for conv in range(-(-turns // CONVERSATION))
            for name in speakers(conv)]


@dataclass
class Chunk:
    """One chunk of generated history: its records, and per cube the memories it added."""

    turns: int
    records: list[Record] = field(default_factory=list)  # conversations, items, linked
    added: list[Record] = field(default_factory=list)  # the items' ``added`` updates
    nodes: dict[str, list[tuple[MemoryItem, int]]] = field(default_factory=dict)  # pool index
    edges: dict[str, list[Edge]] = field(default_factory=dict)
    chats: dict[str, tuple[str, tuple[Message, ...]]] = field(default_factory=dict)  # session


def chunk_at(start: int, pool: list[str], seed: int, prefix: str = "hist",
             encoded: bool = True) -> Chunk:
    """The chunk of turns ``start`` .. ``start + CHUNK - 1`` (``start`` a multiple of CHUNK);
    without ``encoded`` its records are left out (what a dump needs is the nodes)."""
    conv = start // CONVERSATION
    a, b = speakers(conv)
    rng = random.Random(f"{seed}:{start}")
    session = f"s{(start % CONVERSATION) // SESSION}"
    at = T0 + timedelta(hours=start)
    said = [(a if n % 2 == 0 else b, rng.randrange(len(pool)),
             at + timedelta(minutes=n - start)) for n in range(start, start + CHUNK)]
    out = Chunk(CHUNK)
    for me in (a, b):
        cube = cube_of(prefix, conv, me)
        messages = tuple(Message(id=f"t{start + i}", role="user" if who == me else "assistant",
                                 name=who, content=pool[p], timestamp=when)
                         for i, (who, p, when) in enumerate(said))
        out.chats[cube] = (session, messages)
        chunk = ConversationChunk(user_id=cube, cube_id=cube, session_id=session,
                                  messages=messages, event_id=f"c{cube}{start:09d}")
        if encoded:
            out.records.append((CONVERSATIONS, cube.encode(), CONVERSATIONS.encode(chunk)))
        background = " ".join(pool[p] for _, p, _ in said)
        nodes: list[tuple[MemoryItem, int]] = []
        for m, (_, p, when) in zip(messages, said, strict=True):
            forms = (f"{m.name}: {m.content}", f"{m.name} said that {m.content.lower()}",
                     f"On {when:%Y-%m-%d} {m.name} talked about "
                     f"{' '.join(m.content.split()[2:6])}.")
            for k, text in enumerate(forms):
                node = f"{cube}-{m.id}-{k}"
                meta = MemoryMetadata(user_id=cube, cube_id=cube, session_id=session,
                                      key=text[:40], tags=tuple(text.lower().split()[:4]),
                                      background=background, memory_type="LongTermMemory",
                                      memory_time=when, valid_from=when, created_at=when,
                                      updated_at=when)
                item = ExtractedMemory(user_id=cube, cube_id=cube, id=node, memory=text,
                                       key=meta.key, tags=meta.tags, background=background,
                                       memory_time=when, valid_from=when,
                                       chunk_event_id=chunk.event_id, event_id=f"i{node}")
                stored = MemoryItem(id=node, memory=text, metadata=meta)
                nodes.append((stored, p))
                if not encoded:
                    continue
                update = MemoryUpdate(user_id=cube, cube_id=cube, action="added",
                                      stage="memory.add", node_id=node, node=stored,
                                      cause_event_id=item.event_id, event_id=f"u{node}")
                out.records.append((MEMORY_ITEMS, cube.encode(), MEMORY_ITEMS.encode(item)))
                out.added.append((MEMORY_UPDATES, cube.encode(), MEMORY_UPDATES.encode(update)))
        edges = [Edge(source=x.id, target=y.id, type="FOLLOWS",
                      reason=f"session {session} order")
                 for (x, _), (y, _) in zip(nodes, nodes[1:], strict=False)]
        linked = MemoryUpdate(user_id=cube, cube_id=cube, action="linked", stage="reorganize",
                              edges=tuple(edges), event_id=f"l{cube}{start:09d}")
        if encoded:
            out.records.append((MEMORY_UPDATES, cube.encode(), MEMORY_UPDATES.encode(linked)))
        out.nodes[cube], out.edges[cube] = nodes, edges
    return out


def chunks(first: int, last: int, pool: list[str], seed: int, prefix: str = "hist",
           encoded: bool = True) -> Iterator[Chunk]:
    """The chunks of turns ``first`` .. ``last - 1``."""
    for start in range(first, last, CHUNK):
        yield chunk_at(start, pool, seed, prefix, encoded)


def dumps(first: int, last: int, pool: list[str], vectors: list[list[float]],
          seed: int) -> Iterator[CubeGraph]:
    """The memories of turns ``first`` .. ``last - 1`` as one dump per cube (a conversation
    cut by ``first`` or ``last`` gives a dump of its part: a load adds to what is there)."""
    for conv in range(first // CONVERSATION, -(-last // CONVERSATION)):
        lo, hi = max(first, conv * CONVERSATION), min(last, (conv + 1) * CONVERSATION)
        held: dict[str, tuple[list[MemoryItem], list[Edge], dict[str, list[float]]]] = {}
        for c in chunks(lo, hi, pool, seed, encoded=False):
            for cube, nodes in c.nodes.items():
                mine = held.setdefault(cube, ([], [], {}))
                mine[0].extend(n for n, _ in nodes)
                mine[1].extend(c.edges[cube])
                mine[2].update({n.id: vectors[p] for n, p in nodes})
        for cube, (nodes_, edges_, vecs) in held.items():
            yield CubeGraph(cube_id=cube, nodes=tuple(nodes_), edges=tuple(edges_),
                            vectors=vecs, owner=cube)
