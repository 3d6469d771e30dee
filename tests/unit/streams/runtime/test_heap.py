"""Full collections in a started worker walk only what was made after start-up."""

from __future__ import annotations

import gc

from memstream.streams.runtime.heap import freeze_startup_objects


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
