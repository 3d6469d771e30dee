"""Full collections in a started worker walk only what was made after start-up."""

from __future__ import annotations

import gc
from collections import deque

from memstream.streams.runtime.heap import (
    FULL_PASS_EVERY,
    freeze_startup_objects,
    spread_full_passes,
)


class Held:
    """An object that lives as long as the process, like a worker's start-up state."""


def test_start_up_objects_are_out_of_the_collectors_reach() -> None:
    held = [Held() for _ in range(1000)]
    try:
        frozen = freeze_startup_objects()
        assert frozen >= 1000
        walked = {id(o) for o in gc.get_objects()}  # what a full collection walks
        assert not any(id(h) in walked for h in held)
        later = Held()
        assert any(o is later for o in gc.get_objects())
    finally:
        gc.unfreeze()


def full_passes_while_caching(objects: int, held: int = 50_000) -> int:
    """Full collections made while ``objects`` objects pass through a cache of ``held`` (as
    a worker's caches turn over: each new one pushes out the oldest), each with a reference
    cycle left behind (as requests leave them: only the collector frees those)."""
    passes = 0

    def count(phase: str, info: dict[str, int]) -> None:
        nonlocal passes
        if phase == "start" and info["generation"] == 2:
            passes += 1

    cache: deque[Held] = deque(maxlen=held)
    gc.callbacks.append(count)
    try:
        for _ in range(objects):
            cache.append(Held())
            cycle = Held()
            cycle.self = cycle  # type: ignore[attr-defined]
    finally:
        gc.callbacks.remove(count)
    return passes


def test_a_worker_makes_a_tenth_as_many_full_collections_while_its_caches_turn_over() -> None:
    before = gc.get_threshold()
    gc.collect()
    gc.freeze()  # what the test process holds already (a worker freezes its start-up too)
    try:
        gc.set_threshold(700, 10, 10)  # CPython's defaults (a worker started here changes them)
        default = full_passes_while_caching(2_000_000)
        spread_full_passes()
        assert gc.get_threshold() == (700, 10, FULL_PASS_EVERY)  # the young ones as often
        gc.collect()
        spread = full_passes_while_caching(2_000_000)
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()
    assert default >= 10 and spread <= default / 5
