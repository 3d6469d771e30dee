"""The one least-recently-used map behind every per-cube cache of a worker.

A worker serving thousands of cubes must not hold something for each of them: the
in-memory vector index in front of Milvus Lite, the episode indexes of turn ranking, the
uses of searches not yet written, the budget ledger and the metrics' cube labels are each
bounded by a count of cubes (or a weight such as vectors), and the least recently used
goes first. A cache that holds what the stores do not have yet hands each entry to
``on_evict`` as it leaves, to write it first; a cache of what the stores hold just drops
it, and the next use reads the cube again. Sits in ``sinks/`` because the stores' caches
and the stages' share it, and stages import sinks, never the reverse.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class LRU(Generic[K, V]):
    """A map of at most ``max_items`` entries and, with ``weigh``, at most ``max_weight`` of
    their weights in total (None: no such bound). Beyond either, the least recently used
    entries leave, each handed to ``on_evict``; the newest one stays however heavy it is.
    ``get`` and ``put`` count as a use, ``peek`` and ``in`` do not."""

    def __init__(self, max_items: int | None = None, *, max_weight: int | None = None,
                 weigh: Callable[[V], int] | None = None,
                 on_evict: Callable[[K, V], None] | None = None) -> None:
        if max_weight is not None and weigh is None:
            raise ValueError("a bound on the weight needs weigh")
        self.max_items = max_items
        self.max_weight = max_weight
        self._weigh = weigh
        self._on_evict = on_evict
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._weights: dict[K, int] = {}
        self.weight = 0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __iter__(self) -> Iterator[K]:
        """Keys, least recently used first."""
        return iter(list(self._entries))

    def items(self) -> list[tuple[K, V]]:
        """Entries, least recently used first."""
        return list(self._entries.items())

    def values(self) -> list[V]:
        return list(self._entries.values())

    def get(self, key: K) -> V | None:
        """The entry, now the most recently used (None if not held)."""
        value = self._entries.get(key)
        if value is not None:
            self._entries.move_to_end(key)
        return value

    def peek(self, key: K) -> V | None:
        """The entry, its place unchanged."""
        return self._entries.get(key)

    def put(self, key: K, value: V) -> None:
        """Hold ``value`` as the most recently used; older entries leave beyond the bounds."""
        self._entries[key] = value
        self._entries.move_to_end(key)
        self._reweigh(key, value)
        self._trim()

    def setdefault(self, key: K, make: Callable[[], V]) -> V:
        """The entry (now the most recently used), made and put if not held."""
        value = self.get(key)
        if value is None:
            value = make()
            self.put(key, value)
        return value

    def reweigh(self, key: K) -> None:
        """The entry changed in place: weigh it again (entries may leave)."""
        value = self._entries.get(key)
        if value is not None:
            self._reweigh(key, value)
            self._trim()

    def pop(self, key: K) -> V | None:
        """Take the entry out, without ``on_evict`` (the caller has it)."""
        value = self._entries.pop(key, None)
        self.weight -= self._weights.pop(key, 0)
        return value

    def clear(self) -> None:
        """Drop every entry, without ``on_evict``."""
        self._entries.clear()
        self._weights.clear()
        self.weight = 0

    def evict_all(self) -> None:
        """Hand every entry to ``on_evict``, least recently used first, and drop it."""
        while self._entries:
            self._evict_oldest()

    def _reweigh(self, key: K, value: V) -> None:
        if self._weigh is not None:
            weight = self._weigh(value)
            self.weight += weight - self._weights.get(key, 0)
            self._weights[key] = weight

    def _over(self) -> bool:
        return (self.max_items is not None and len(self._entries) > self.max_items) or (
            self.max_weight is not None and self.weight > self.max_weight)

    def _trim(self) -> None:
        while len(self._entries) > 1 and self._over():
            self._evict_oldest()

    def _evict_oldest(self) -> None:
        key, value = self._entries.popitem(last=False)
        self.weight -= self._weights.pop(key, 0)
        self.evictions += 1
        if self._on_evict is not None:
            self._on_evict(key, value)
