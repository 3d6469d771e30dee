"""The memories of bench/tenancy.py: generated chats, cube sizes, and who searches what.

No copied data. A pool of chat chunks is generated once: five turns each, a user telling a
friend about their life (three user turns, each carrying one personal statement: a pet, a
job, a move, a trip, an allergy, a relative, ...) and the friend answering. Each chunk gives
what the pipeline's extraction stores for a chat chunk: one episode (the turns, kept whole)
and one statement per user turn (``UserMemory`` for what the user is or likes,
``LongTermMemory`` for events and plans), each citing its turn and its episode. Their
vectors are computed once (the pool's texts) and reused in every cube that draws the chunk:
a cube's copy names the cube's own user and has its own ids, times and sessions, so its text
and keywords are its own while its vector is the pool's (the name aside, the same words).

A cube of ``n`` memories holds ``min(20, n // 5)`` working-memory copies of its newest
statements (working memory's capacity is 20) and, for the rest, chunks in time order: an
episode and its three statements, the last chunk cut short to make ``n`` exact. Cube sizes
follow a power law over the cubes (``size_exponent``), a floor of ``MIN_CUBE`` each, so a
few cubes are large and most are small; searches pick cubes with a Zipf law over a random
ranking of the cubes (independent of size), so hot and cold cubes are of every size.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np

from memstream.streams.core.working_memory import working_copy
from memstream.topics.ids import stable_id
from memstream.topics.models import Edge, MemoryItem, MemoryMetadata, MemoryType, SourceRef

WORKING_CAPACITY = 20  # MemorySettings.working_memory_capacity's default
MIN_CUBE = 10
CHUNK_TURNS = 5
SESSION_CHUNKS = 4  # a session of 20 turns
NODES_PER_CHUNK = 4  # an episode and its three statements

NAMES = ["Maya", "Jonas", "Aiko", "Tariq", "Lucia", "Emeka", "Sofia", "Arjun", "Noor",
         "Mateo", "Ingrid", "Kofi", "Lena", "Ravi", "Chloe", "Dmitri", "Amara", "Felix",
         "Hana", "Omar", "Greta", "Yusuf", "Elena", "Bao", "Zara", "Nikolai", "Priya",
         "Samir", "Freya", "Diego"]
FRIENDS = ["Sam", "Alex", "Jordan", "Robin", "Casey", "Morgan", "Taylor", "Jamie"]
CITIES = ["Porto", "Kyoto", "Denver", "Tallinn", "Oaxaca", "Lyon", "Hobart", "Nairobi",
          "Bergen", "Valparaiso", "Ghent", "Halifax", "Cusco", "Seville", "Krakow"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]
ANIMALS = ["beagle", "tabby cat", "parrot", "rescue greyhound", "corgi", "rabbit",
           "border collie", "bearded dragon"]
PET_NAMES = ["Biscuit", "Pepper", "Mochi", "Ziggy", "Olive", "Bruno", "Clementine", "Nori"]
JOBS = ["nurse", "data analyst", "carpenter", "school teacher", "UX designer", "pharmacist",
        "sous chef", "civil engineer", "librarian", "paramedic"]
COMPANIES = ["a children's hospital", "a solar startup", "the city library", "a bakery chain",
             "a shipping firm", "a game studio", "the regional council", "a law office"]
HOBBIES = ["bouldering", "pottery", "salsa dancing", "trail running", "chess", "birdwatching",
           "woodworking", "choir singing", "open-water swimming", "watercolour painting"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
FOODS = ["peanuts", "shellfish", "gluten", "lactose", "sesame", "kiwi", "eggs"]
RELATIVES = ["sister", "brother", "niece", "nephew", "grandmother", "son", "daughter", "cousin"]
RELATIVE_NAMES = ["Ada", "Leo", "Iris", "Theo", "Mila", "Hugo", "Nina", "Oscar", "Ruth"]
SIGHTS = ["cherry blossoms", "northern lights", "old harbour", "jazz festival",
          "mountain trails", "food markets", "cathedral", "whale watching"]
LANGUAGES = ["Portuguese", "Japanese", "Swahili", "Italian", "Korean", "German", "Arabic"]
BOOKS = [("The Long Orbit", "a generation ship"), ("Salt and Stone", "a fishing village"),
         ("Quiet Engines", "the first railways"), ("A Year of Bread", "sourdough baking"),
         ("Paper Cities", "urban planning"), ("The Cartographer", "old maps")]

# (what the user says, the statement kept, its key, its tags, a question about it,
#  a UserMemory: what the user is or likes; else an event or plan: LongTermMemory)
TOPICS: list[tuple[str, str, str, tuple[str, ...], str, bool]] = [
    ("I finally adopted a {animal} and named it {pet}!", "{N} adopted a {animal} named {pet}.",
     "{N}'s pet", ("pet", "{animal}"), "What is the name of {N}'s pet?", True),
    ("I started a new job as a {job} at {company} this month.",
     "{N} works as a {job} at {company}.", "{N}'s job", ("work", "{job}"),
     "Where does {N} work now?", True),
    ("We're moving to {city} in {month}, the flat is already rented.",
     "{N} is moving to {city} in {month}.", "{N}'s move", ("move", "{city}"),
     "Where is {N} moving to?", False),
    ("I've been doing {hobby} every {day} with my friend {friend}.",
     "{N} does {hobby} with {friend} every {day}.", "{N}'s hobby", ("hobby", "{hobby}"),
     "What does {N} do on {day}s?", True),
    ("I can't eat {food}, I'm quite allergic to it.", "{N} is allergic to {food}.",
     "{N}'s allergy", ("health", "{food}"), "What is {N} allergic to?", True),
    ("My {relative} {rname} just turned {age} last week.",
     "{N}'s {relative} {rname} turned {age}.", "{N}'s {relative}", ("family", "{relative}"),
     "How old is {N}'s {relative} {rname}?", False),
    ("We booked a trip to {city} in {month}, mostly for the {sight}.",
     "{N} plans a trip to {city} in {month} to see the {sight}.", "{N}'s trip",
     ("travel", "{city}"), "When is {N}'s trip to {city}?", False),
    ("I'm reading {book} right now, it's about {about}.",
     "{N} is reading {book}, a book about {about}.", "{N}'s reading", ("books", "{book}"),
     "What book is {N} reading?", True),
    ("I've been learning {language} on my commute for {months} months.",
     "{N} has been learning {language} for {months} months.", "{N}'s language",
     ("learning", "{language}"), "Which language is {N} learning?", True),
    ("{friend}'s wedding is on {month} {dayno} in {city}, I'm giving a speech.",
     "{N} gives a speech at {friend}'s wedding on {month} {dayno} in {city}.",
     "{friend}'s wedding", ("wedding", "{friend}"), "When is {friend}'s wedding?", False),
]
ANSWERS = ["That's wonderful, {N}! How do you feel about it?", "Oh wow, tell me more about it.",
           "I didn't know that. Is it going well so far?", "Nice! We should celebrate soon.",
           "That sounds like a lot, are you doing okay?", "Ha, that is so you. Good for you!",
           "Really? Since when have you been planning that?", "I love that. Send me photos!"]
PLACEHOLDER = "{N}"  # the cube's user, filled in per cube


@dataclass(frozen=True)
class Statement:
    said: str  # the user's turn, with ``{N}`` where their name goes
    fact: str
    key: str
    tags: tuple[str, ...]
    question: str
    user_memory: bool


@dataclass(frozen=True)
class PoolChunk:
    """Five turns: the user (turns 0, 2, 4, one statement each) and a friend (1, 3)."""

    friend: str
    statements: tuple[Statement, Statement, Statement]
    answers: tuple[str, str]

    def turns(self, name: str) -> list[tuple[str, str]]:
        """(speaker, text) of each turn, the user called ``name``."""
        s, a = self.statements, self.answers
        return [(name, s[0].said), (self.friend, a[0]), (name, s[1].said),
                (self.friend, a[1]), (name, s[2].said)]


def _statement(rng: random.Random) -> Statement:
    said, fact, key, tags, question, user_memory = rng.choice(TOPICS)
    book, about = rng.choice(BOOKS)
    slots = {"animal": rng.choice(ANIMALS), "pet": rng.choice(PET_NAMES),
             "job": rng.choice(JOBS), "company": rng.choice(COMPANIES),
             "city": rng.choice(CITIES), "month": rng.choice(MONTHS),
             "hobby": rng.choice(HOBBIES), "day": rng.choice(WEEKDAYS),
             "friend": rng.choice(FRIENDS), "food": rng.choice(FOODS),
             "relative": rng.choice(RELATIVES), "rname": rng.choice(RELATIVE_NAMES),
             "age": str(rng.randint(2, 90)), "sight": rng.choice(SIGHTS), "book": book,
             "about": about, "language": rng.choice(LANGUAGES), "months": str(rng.randint(2, 30)),
             "dayno": str(rng.randint(1, 28)), "N": PLACEHOLDER}
    return Statement(said.format(**slots), fact.format(**slots), key.format(**slots),
                     tuple(t.format(**slots) for t in tags), question.format(**slots),
                     user_memory)


def make_pool(chunks: int, seed: int) -> list[PoolChunk]:
    rng = random.Random(seed)
    return [PoolChunk(rng.choice(FRIENDS), (_statement(rng), _statement(rng), _statement(rng)),
                      (rng.choice(ANSWERS), rng.choice(ANSWERS))) for _ in range(chunks)]


def pool_texts(pool: Sequence[PoolChunk], name: str = "Maya") -> tuple[list[str], list[str]]:
    """What each pool item's vector is computed from, as ``MemoryItem.embedding_text``
    would give it: the episodes' lines without their times, and the statements."""
    episodes = ["\n".join(f"{who}: {text}" for who, text in c.turns(PLACEHOLDER))
                .replace(PLACEHOLDER, name) for c in pool]
    facts = [s.fact.replace(PLACEHOLDER, name) for c in pool for s in c.statements]
    return episodes, facts


# --- cubes ------------------------------------------------------------------------------


def cube_sizes(cubes: int, memories: int, exponent: float, floor: int = MIN_CUBE) -> list[int]:
    """Sizes summing to ``memories``, the i-th ∝ (i + 1) ** -exponent above ``floor``,
    largest first (rounded by largest remainder)."""
    if memories < floor * cubes:
        raise ValueError(f"{memories} memories cannot give {cubes} cubes {floor} each")
    weights = np.arange(1, cubes + 1, dtype=np.float64) ** -exponent
    share = (memories - floor * cubes) * weights / weights.sum()
    sizes = np.floor(share).astype(np.int64)
    rest = int(memories - floor * cubes - sizes.sum())
    sizes[np.argsort(-(share - sizes), kind="stable")[:rest]] += 1
    return [int(s) + floor for s in sizes]


@dataclass(frozen=True)
class CubePlan:
    """One cube: its id (also its user), size, user's name and first pool chunk."""

    cube: str
    size: int
    name: str
    start: int  # the pool chunk its first chunk is

    @property
    def working(self) -> int:
        return min(WORKING_CAPACITY, self.size // 5)

    @property
    def chunks(self) -> int:
        return -(-(self.size - self.working) // NODES_PER_CHUNK)


def plan_cubes(sizes: Sequence[int], pool_size: int, seed: int) -> list[CubePlan]:
    def pick(i: int, what: str, n: int) -> int:
        digest = hashlib.sha256(f"{seed}:{what}:{i}".encode()).digest()
        return int.from_bytes(digest[:8], "big") % n

    return [CubePlan(f"ten{i:05d}", size, NAMES[pick(i, "name", len(NAMES))],
                     pick(i, "start", pool_size)) for i, size in enumerate(sizes)]


@dataclass
class CubeData:
    rows: list[tuple[MemoryItem, np.ndarray]]
    edges: list[Edge]


def cube_data(plan: CubePlan, pool: Sequence[PoolChunk], episode_vectors: np.ndarray,
              fact_vectors: np.ndarray, base: datetime | None = None) -> CubeData:
    """The cube's nodes with their vectors (exactly ``plan.size``) and its provenance
    edges (each statement to its episode)."""
    base = base or datetime(2024, 1, 1, tzinfo=UTC)
    first = base + timedelta(hours=int(plan.start) * 7 % 4000)
    cube, name = plan.cube, plan.name
    long_term = plan.size - plan.working
    rows: list[tuple[MemoryItem, np.ndarray]] = []
    edges: list[Edge] = []
    facts: list[tuple[MemoryItem, np.ndarray]] = []
    for c in range(plan.chunks):
        p = (plan.start + c) % len(pool)
        chunk = pool[p]
        session = f"s{c // SESSION_CHUNKS}"
        at = first + timedelta(days=c // SESSION_CHUNKS * 3, minutes=c % SESSION_CHUNKS * 10)
        turns = chunk.turns(name)
        mids = [f"{session}:{c % SESSION_CHUNKS * CHUNK_TURNS + t}" for t in range(CHUNK_TURNS)]
        times = [at + timedelta(minutes=2 * t) for t in range(CHUNK_TURNS)]
        text = "\n".join(f"[{when:%Y-%m-%d %H:%M}] {who}: {said.replace(PLACEHOLDER, name)}"
                         for (who, said), when in zip(turns, times, strict=True))
        episode = MemoryItem(id=stable_id("tenancy", cube, "episode", c), memory=text,
                             metadata=MemoryMetadata(
            user_id=cube, cube_id=cube, memory_type="EpisodicMemory", type="event",
            session_id=session, key=f"{name}, {chunk.friend} · {at:%Y-%m-%d %H:%M}",
            tags=(name, chunk.friend, *chunk.statements[0].tags),
            sources=tuple(SourceRef(kind="message", message_id=m,
                                    role="user" if t % 2 == 0 else "assistant")
                          for t, m in enumerate(mids)),
            memory_time=at, valid_from=at, created_at=at, updated_at=at))
        rows.append((episode, episode_vectors[p]))
        topics = ", ".join(s.key.replace(PLACEHOLDER, name) for s in chunk.statements)
        for k, st in enumerate(chunk.statements):
            if len(rows) >= long_term:
                break
            when = times[2 * k]
            memory_type: MemoryType = "UserMemory" if st.user_memory else "LongTermMemory"
            node = MemoryItem(id=stable_id("tenancy", cube, "fact", c, k),
                              memory=st.fact.replace(PLACEHOLDER, name), metadata=MemoryMetadata(
                user_id=cube, cube_id=cube, memory_type=memory_type,
                type="fact" if st.user_memory else "event", session_id=session,
                key=st.key.replace(PLACEHOLDER, name), tags=st.tags,
                background=f"{name} told {chunk.friend} about {topics}.",
                sources=(SourceRef(kind="message", message_id=mids[2 * k], role="user"),
                         SourceRef(kind="memory", memory_id=episode.id)),
                valid_from=when, created_at=when, updated_at=when))
            rows.append((node, fact_vectors[p * 3 + k]))
            facts.append((node, fact_vectors[p * 3 + k]))
            edges.append(Edge(source=node.id, target=episode.id, type="EXTRACTED_FROM"))
        if len(rows) >= long_term:
            break
    if plan.working:
        rows.extend((working_copy(node), vec) for node, vec in facts[-plan.working:])
    return CubeData(rows, edges)


# --- who searches what ------------------------------------------------------------------


def zipf_order(cubes: int, searches: int, exponent: float, seed: int) -> list[int]:
    """Cube indexes of ``searches`` searches: the cubes ranked at random, the one of rank r
    chosen with probability ∝ r ** -exponent."""
    rng = np.random.default_rng(seed)
    ranking = rng.permutation(cubes)
    weights = np.arange(1, cubes + 1, dtype=np.float64) ** -exponent
    ranks = rng.choice(cubes, size=searches, p=weights / weights.sum())
    return [int(ranking[r]) for r in ranks]


def question_for(plan: CubePlan, pool: Sequence[PoolChunk], rng: random.Random) -> str:
    """A question about a statement the cube holds."""
    c = rng.randrange(plan.chunks)
    st = rng.choice(pool[(plan.start + c) % len(pool)].statements)
    return st.question.replace(PLACEHOLDER, plan.name)


def iter_jobs(plans: Sequence[CubePlan], pool: Sequence[PoolChunk], order: Sequence[int],
              seed: int) -> Iterator[tuple[str, str, bool]]:
    """(cube, question, first search of that cube) for each search in ``order``."""
    rng = random.Random(seed)
    seen: set[int] = set()
    for i in order:
        yield plans[i].cube, question_for(plans[i], pool, rng), i not in seen
        seen.add(i)
