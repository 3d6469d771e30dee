"""A cube's episodes split into turns, with BM25 over turns and over whole episodes.

Search ranks turns, not just whole episodes: an episode's lines are its turns, in the order
of its message sources, and neighbouring turns of one session (across episode boundaries)
form the excerpt a hit returns. The index is built from the graph store on first use and
rebuilt when the cube's count of activated episodes changes (one count query, made by a
search when the last was ``COUNT_EVERY_S`` or more before, or when the search waits for a
write of its caller's, ``after``; that search waits for the rebuild) or after ``MAX_AGE_S``
(in the background: the search that finds it old still uses it); it holds text, never the
store's truth. A cube
with more than ``search.episode_index_inline`` episodes is first indexed in the background
(``EpisodeIndexes.ready``): its searches until then are served without turn ranking.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import TYPE_CHECKING, overload

import numpy as np

from memstream.sinks.lru import LRU
from memstream.streams.core.crosslingual import script_code
from memstream.streams.core.lexical import BM25, terms
from memstream.streams.runtime.foreground import Foreground, paced
from memstream.topics.models import MemoryItem
from memstream.topics.settings import SearchSettings

if TYPE_CHECKING:
    from memstream.sinks.query import MemoryQuery

log = logging.getLogger("memstream.search")

# Episodes a background build reads at a time (``_paged_episodes``).
READ_PAGE = 100

# A rebuild also happens after this long, for changes a count does not show (an episode
# deleted and another added between two searches).
MAX_AGE_S = 60.0
# A search uses the index without counting the cube's episodes again when they were counted
# this recently: back-to-back searches of a cube made the count on every one, two graph
# queries of a two-cube search on the way to its turn ranking (19 ms each on average,
# queued behind the search's other reads). A search never misses an episode applied more
# than this long before it; one that waits for its caller's write (``after``) counts.
COUNT_EVERY_S = 1.0


# The index words of a turn's line, by its text: an index is rebuilt whenever its cube's
# episodes change, the speakers' cubes of one conversation hold the same episodes, and
# reading the words (segmenting, lemmas, stems) was most of a build (a cube's first search
# waits for it). A plain dict emptied when full: tuples of strings are nothing the cyclic
# collector walks (``streams/runtime/heap.py``).
_LINE_TERMS: dict[str, tuple[str, ...]] = {}
LINE_TERMS_HELD = 100_000


def _line_terms(line: str) -> tuple[str, ...]:
    found = _LINE_TERMS.get(line)
    if found is None:
        if len(_LINE_TERMS) >= LINE_TERMS_HELD:
            _LINE_TERMS.clear()
        found = _LINE_TERMS[line] = tuple(terms(indexed(line)))
    return found


@dataclass(frozen=True)
class TurnRef:
    """One turn: its episode (position in ``EpisodeIndex.episodes``), line and message id."""

    episode: int
    line: int
    message_id: str | None
    text: str


class Turns(Sequence[TurnRef]):
    """A cube's turns held as columns, a ``TurnRef`` made on each access. Arrays and tuples
    of strings are nothing the cyclic collector walks, where a ``TurnRef`` per turn was: a
    worker searching 10,000 cubes held ~23,000 of them, a quarter of what each full
    collection walked (``streams/runtime/heap.py``)."""

    __slots__ = ("_episode", "_line", "_message", "_text")

    def __init__(self, episode: Sequence[int], line: Sequence[int],
                 message: Sequence[str | None], text: Sequence[str]) -> None:
        """Each turn's episode, line, message id and text, in the same order."""
        self._episode = np.asarray(episode, dtype=np.int64)
        self._line = np.asarray(line, dtype=np.int32)
        self._message = tuple(message)
        self._text = tuple(text)

    def __len__(self) -> int:
        return len(self._text)

    @overload
    def __getitem__(self, i: int) -> TurnRef: ...

    @overload
    def __getitem__(self, i: slice) -> list[TurnRef]: ...

    def __getitem__(self, i: int | slice) -> TurnRef | list[TurnRef]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return TurnRef(int(self._episode[i]), int(self._line[i]), self._message[i],
                       self._text[i])

    @property
    def episode_of_turn(self) -> np.ndarray:
        """Each turn's episode (position in ``EpisodeIndex.episodes``)."""
        return self._episode


# A turn's line names its speaker ("[time] Caroline: …"); a named speaker is worth finding by
# name, but a bare role ("user", "assistant") is on every line of a chat with an agent and
# would match every query that says "the user".
_ROLE_LABEL = re.compile(r"^(\[[^\]\n]*\]\s*)?(user|assistant|system|tool)\s*:", re.I | re.M)


# "[time] Name: text": the speaker a turn's line names (what ``speaker_of`` returns).
_SPEAKER = re.compile(r"^(?:\[[^\]\n]*\]\s*)?([^:\n\[\]]{1,40}?)\s*:")


def speaker_of(line: str) -> str:
    """The speaker a turn's line names, casefolded ("" when it names none)."""
    found = _SPEAKER.match(line)
    return " ".join(found.group(1).split()).casefold() if found else ""


def indexed(text: str) -> str:
    """The words of an episode or turn that keyword ranking reads: role labels left out."""
    return _ROLE_LABEL.sub(lambda m: m.group(1) or "", text)


@dataclass
class EpisodeIndex:
    """The turns of a cube's activated episodes, session by session in time order."""

    episodes: list[MemoryItem]
    turns: Turns
    session_of_turn: tuple[str, ...]
    turn_bm25: BM25
    episode_bm25: BM25
    episode_of_turn: np.ndarray
    position: dict[str, int] = field(default_factory=dict)  # episode id -> position
    # message id -> its turns (tuples of ints: nothing the cyclic collector walks once it has
    # met them, where a list per message was one more object in every full pass)
    turns_of_message: dict[str, tuple[int, ...]] = field(default_factory=dict)
    built_at: float = 0.0
    version: int = 0
    counted_at: float = 0.0  # when ``version`` was last found to be the cube's count
    speaker_of_turn: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    speakers: list[str] = field(default_factory=list)  # position = code in speaker_of_turn
    # per turn, the script its words are in (``crosslingual.SCRIPT_CODES``)
    script_of_turn: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int8))
    # statement id -> message ids of the turns it came from (a statement's sources never
    # change; filled as statements are first met, carried over when the index is rebuilt)
    statement_messages: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # per episode, the day it was said (its time in its own UTC offset)
    days: list[date] = field(default_factory=list)

    @classmethod
    def build(cls, episodes: list[MemoryItem], version: int,
              pause: Callable[[], None] | None = None) -> EpisodeIndex:
        """The index of ``episodes`` (a cube's activated ones, counted ``version``);
        ``pause`` is called every ``PAUSE_EVERY`` turns or documents (a background build
        lets searches go first)."""
        step = paced(pause)
        # held without their usage histories: the index is minutes old at most, so a history
        # here would be stale anyway (usage is written against the store's own, see
        # ``streams/search/usage.py``), and 20 records per episode were a third of the objects
        # every full pass of the cyclic collector walked in a searching worker
        episodes = [e.evolve(usage=()) if e.metadata.usage else e for e in episodes]
        episodes = sorted(episodes, key=lambda e: (e.metadata.session_id or "",
                                                   e.metadata.memory_time or e.metadata.created_at,
                                                   e.id))
        of_episode: list[int] = []
        line_nos: list[int] = []
        messages: list[str | None] = []
        texts: list[str] = []
        sessions: list[str] = []
        for pos, episode in enumerate(episodes):
            ids = [s.message_id for s in episode.metadata.sources
                   if s.kind == "message" and s.message_id]
            session = episode.metadata.session_id or f"episode:{episode.id}"
            for line_no, line in enumerate(episode.memory.split("\n")):
                of_episode.append(pos)
                line_nos.append(line_no)
                messages.append(ids[line_no] if line_no < len(ids) else None)
                texts.append(line)
                sessions.append(session)
        turn_terms = []
        names = []
        scripts = []
        for text in texts:  # the words, speaker and script of each turn: most of a build
            step()
            turn_terms.append(_line_terms(text))
            names.append(speaker_of(text))
            scripts.append(script_code(text))
        episode_terms: list[list[str]] = [[] for _ in episodes]
        for pos, words in zip(of_episode, turn_terms, strict=True):  # an episode's words are
            episode_terms[pos].extend(words)  # its lines' (no word spans a line break)
        turns = Turns(of_episode, line_nos, messages, texts)
        index = cls(
            episodes=episodes, turns=turns, session_of_turn=tuple(sessions),
            turn_bm25=BM25(turn_terms, pause=pause),
            episode_bm25=BM25(episode_terms, pause=pause),
            episode_of_turn=turns.episode_of_turn,
            position={e.id: i for i, e in enumerate(episodes)},
            built_at=time.monotonic(), version=version)
        index.counted_at = index.built_at
        index.days = [(e.metadata.memory_time or e.metadata.created_at).date() for e in episodes]
        index.speakers = sorted({n for n in names if n})
        codes = {n: i for i, n in enumerate(index.speakers)}
        index.speaker_of_turn = np.asarray([codes.get(n, -1) for n in names], dtype=np.int64)
        index.script_of_turn = np.asarray(scripts, dtype=np.int8)
        of_message: dict[str, list[int]] = {}
        for i, message in enumerate(messages):
            if message:
                of_message.setdefault(message, []).append(i)
        index.turns_of_message = {m: tuple(found) for m, found in of_message.items()}
        return index


class EpisodeIndexes:
    """Per store and cube, the latest ``EpisodeIndex`` (one rebuild at a time per cube), of
    the cubes searched last: at most ``max_cubes`` and ``max_turns`` turns in all (an index
    costs ~2 KB a turn, its episodes' text included). A cube that left is built again from
    the store on its next search, as on its first."""

    def __init__(self, max_cubes: int = 64, max_turns: int = 200_000) -> None:
        self._indexes: LRU[str, EpisodeIndex] = LRU(
            max_cubes, max_weight=max_turns, weigh=lambda index: len(index.turns),
            on_evict=self._evicted)
        self._locks: dict[str, asyncio.Lock] = {}
        self._refreshing: dict[str, asyncio.Task[EpisodeIndex]] = {}
        # the searches a background build lets go first (``indexes_for``; none: it never waits)
        self.foreground: Foreground | None = None
        self._waited_on: dict[str, int] = {}  # cube -> searches waiting for its build now

    def bound(self, max_cubes: int, max_turns: int) -> None:
        """Hold at most this many cubes and turns (from the next index held on)."""
        self._indexes.max_items, self._indexes.max_weight = max_cubes, max_turns

    @property
    def sizes(self) -> tuple[int, int]:
        """Cubes and turns held now."""
        return len(self._indexes), self._indexes.weight

    def held(self, cube_id: str) -> bool:
        """Whether an index of the cube is held now (it may be rebuilt before use)."""
        return cube_id in self._indexes

    def _evicted(self, cube_id: str, _index: EpisodeIndex) -> None:
        lock = self._locks.get(cube_id)
        if lock is not None and not lock.locked():
            del self._locks[cube_id]

    async def get(self, query: object, cube_id: str, recount: bool = False) -> EpisodeIndex:
        """The cube's index, up to date within ``COUNT_EVERY_S`` (``recount``: now)."""
        from memstream.sinks.query import MemoryQuery

        assert isinstance(query, MemoryQuery)  # noqa: S101
        current = self._indexes.get(cube_id)
        if current is not None and not recount and \
                time.monotonic() - current.counted_at < COUNT_EVERY_S:
            return current
        counts = await query.count_by_type(cube_id)
        version = int(counts.get("EpisodicMemory", 0))
        current = self._indexes.get(cube_id)
        if current is not None and current.version == version:
            current.counted_at = time.monotonic()
            if time.monotonic() - current.built_at >= MAX_AGE_S:
                # only old, not known to be out of date: this search uses it, and the next
                # ones get it rebuilt (a rebuild inside a search was its slowest one)
                self._refresh(query, cube_id, version)
            return current
        return await self._build(query, cube_id, version)

    async def ready(self, query: object, cube_id: str, inline: int) -> bool:
        """Whether a search of the cube may rank turns now: its index is held, or the cube
        holds at most ``inline`` activated episodes (the search builds the index, as fast as
        the rest of it). Otherwise the index is built in the background and this search is
        served without it: a big cube's first search does not wait seconds for it."""
        from memstream.sinks.query import MemoryQuery

        assert isinstance(query, MemoryQuery)  # noqa: S101
        if cube_id in self._indexes:
            return True
        if cube_id in self._refreshing:
            return False
        counts = await query.count_by_type(cube_id)
        version = int(counts.get("EpisodicMemory", 0))
        if version <= inline:
            return True
        log.debug("indexing the %d episodes of %s in the background", version, cube_id)
        self._refresh(query, cube_id, version)
        return False

    def _refresh(self, query: MemoryQuery, cube_id: str, version: int) -> None:
        if cube_id in self._refreshing:
            return
        task = asyncio.create_task(self._build(query, cube_id, version, fresh_s=MAX_AGE_S),
                                   name=f"memstream-episode-index-{cube_id}")
        self._refreshing[cube_id] = task
        task.add_done_callback(lambda t: self._refreshed(cube_id, t))

    def _refreshed(self, cube_id: str, task: asyncio.Task[EpisodeIndex]) -> None:
        self._refreshing.pop(cube_id, None)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.warning("rebuilding the episode index of %s failed: %s", cube_id, exc)

    async def _build(self, query: MemoryQuery, cube_id: str, version: int,
                     fresh_s: float | None = None) -> EpisodeIndex:
        """The cube's index at ``version``, rebuilt unless one is (built within ``fresh_s``
        when given)."""
        lock = self._locks.setdefault(cube_id, asyncio.Lock())
        waiting = fresh_s is None  # a search waits for this build: one the background makes
        if waiting:  # for the cube stops yielding to searches
            self._waited_on[cube_id] = self._waited_on.get(cube_id, 0) + 1
        try:
            async with lock:
                current = self._indexes.peek(cube_id)
                if current is not None and current.version == version and \
                        (fresh_s is None or time.monotonic() - current.built_at < fresh_s):
                    return current
                between, pause = self._yielding(cube_id) if not waiting else (None, None)
                if not version:
                    episodes = []
                elif waiting:  # one read
                    episodes = await query.all_of_type(cube_id, "EpisodicMemory")
                else:
                    episodes = await _paged_episodes(query, cube_id, between)
                index = await asyncio.to_thread(EpisodeIndex.build, episodes, version, pause)
                if fresh_s is not None and len(episodes) != version:
                    index.built_at -= MAX_AGE_S  # pages met a change: read again soon
                if current is not None:
                    index.statement_messages = current.statement_messages
                self._indexes.put(cube_id, index)
                return index
        finally:
            if waiting:
                if self._waited_on[cube_id] <= 1:
                    del self._waited_on[cube_id]
                else:
                    self._waited_on[cube_id] -= 1
            if cube_id not in self._indexes and not lock.locked():
                self._locks.pop(cube_id, None)  # nothing held of the cube: nor its lock

    def _yielding(self, cube_id: str) -> tuple[Callable[[], Awaitable[None]] | None,
                                                 Callable[[], None] | None]:
        """A background build's pauses, between pages (on the event loop) and between
        slices of its thread's work: each waits for the searches in flight to be answered
        (``streams/runtime/foreground.py``), unless a search waits for this very build."""
        foreground = self.foreground
        if foreground is None:
            return None, None

        def wanted() -> bool:
            return cube_id in self._waited_on

        async def between() -> None:
            await foreground.yield_to(unless=wanted)

        def pause() -> None:
            foreground.yield_in_thread(unless=wanted)

        return between, pause


async def _paged_episodes(query: MemoryQuery, cube_id: str,
                          between: Callable[[], Awaitable[None]] | None = None
                          ) -> list[MemoryItem]:
    """The cube's activated episodes, read ``READ_PAGE`` at a time: a background build reads
    between searches, and decoding a big cube's episodes in one read held the event loop
    (half a second for 2,000) while searches waited. ``between``: awaited before each page.
    A node met twice (the store's order moved between pages) is kept once; one missed makes
    the count differ, which the caller sees."""
    found: dict[str, MemoryItem] = {}
    skip = 0
    while True:
        if between is not None:
            await between()
        page = await query.all_of_type(cube_id, "EpisodicMemory", skip=skip, limit=READ_PAGE)
        for item in page:
            found.setdefault(item.id, item)
        if len(page) < READ_PAGE:
            return list(found.values())
        skip += READ_PAGE


_by_query: weakref.WeakKeyDictionary[object, EpisodeIndexes] = weakref.WeakKeyDictionary()


def indexes_for(query: object, search: SearchSettings | None = None,
                foreground: Foreground | None = None) -> EpisodeIndexes:
    """The indexes of one store (a worker's stores live as long as its ``Deps``), bounded by
    ``search.episode_index_cubes`` and ``.episode_index_turns`` when given; their background
    builds let ``foreground``'s searches go first when given."""
    found = _by_query.get(query)
    if found is None:
        found = _by_query[query] = EpisodeIndexes()
    if search is not None:
        found.bound(search.episode_index_cubes, search.episode_index_turns)
    if foreground is not None:
        found.foreground = foreground
    return found
