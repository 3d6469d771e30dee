"""The least-recently-used map every per-cube cache of a worker uses (sinks/lru.py)."""

from __future__ import annotations

import pytest

from memstream.sinks.lru import LRU


def test_beyond_its_count_the_least_recently_used_leave_first_each_handed_over() -> None:
    left: list[tuple[str, int]] = []
    lru: LRU[str, int] = LRU(3, on_evict=lambda k, v: left.append((k, v)))
    for n, key in enumerate("abc"):
        lru.put(key, n)
    assert lru.get("a") == 0  # a use: b is now the oldest
    assert lru.peek("b") == 1 and "c" in lru  # neither is a use
    lru.put("d", 3)
    lru.put("e", 4)
    assert left == [("b", 1), ("c", 2)]
    assert list(lru) == ["a", "d", "e"] and len(lru) == 3 and lru.evictions == 2
    for n in range(1_000):
        lru.put(f"k{n}", n)
        assert len(lru) <= 3


def test_a_weight_bound_keeps_the_total_and_never_drops_the_newest() -> None:
    lru: LRU[str, list[int]] = LRU(max_weight=10, weigh=len)
    lru.put("a", [1] * 4)
    lru.put("b", [1] * 4)
    assert lru.weight == 8
    lru.put("c", [1] * 4)  # 12 > 10: a leaves
    assert list(lru) == ["b", "c"] and lru.weight == 8
    lru.put("huge", [1] * 50)  # alone over the bound, but the newest stays
    assert list(lru) == ["huge"] and lru.weight == 50
    grown = lru.setdefault("d", list)
    grown.extend([1] * 3)
    lru.reweigh("d")  # changed in place: weighed again
    assert list(lru) == ["d"] and lru.weight == 3
    assert lru.pop("d") == [1, 1, 1] and lru.weight == 0 and len(lru) == 0


def test_evict_all_hands_over_everything_oldest_first_and_clear_hands_over_nothing() -> None:
    left: list[str] = []
    lru: LRU[str, int] = LRU(5, on_evict=lambda k, _v: left.append(k))
    for key in "xyz":
        lru.put(key, 0)
    lru.get("x")
    lru.evict_all()
    assert left == ["y", "z", "x"] and len(lru) == 0
    lru.put("w", 1)
    lru.clear()
    assert left == ["y", "z", "x"] and len(lru) == 0


def test_a_weight_bound_needs_a_weigher() -> None:
    with pytest.raises(ValueError, match="weigh"):
        LRU(max_weight=3)
