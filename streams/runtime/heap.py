"""Keep the cyclic garbage collector's full passes short in a long-running worker.

A worker holds a few hundred thousand objects that live as long as it does: modules,
classes, pydantic schemas, the vector index's bindings, faust's machinery. CPython's full
collection walks every one of them, and under a search load it ran every few seconds:
``bench/retrieval_quality.py`` (in one process with the client) counted 28 full
collections of 0.3 s on average, at most 0.6 s, in two minutes of searches, and each one
stalled the searches in flight (their p95 and max). Freezing what exists once the worker
has started moves those objects out of the collector's reach (``gc.freeze``): later passes
walk only what was made since. Frozen objects are still freed when their last reference
goes; only a reference cycle among them would outlive its use, and what exists at start-up
lives as long as the process anyway. The search caches a worker warms once it has started
(``streams/search/warming.py``) are start-up objects too and are frozen when loaded: full
passes walked them every few seconds under a search load (20-60 ms each on the dev split).

What the worker builds later (the caches of the cubes it searches, its clients' metadata)
is walked by every full pass, and CPython considers one after every ten collections of the
middle generation: on a worker serving 10,000 cubes (``bench/tenancy.py``) that was a full
pass of ~90 ms (at most 160) every 1-4 s under a search load, 81 in 2,000 searches, and the
searches they overlapped were the slowest. ``spread_full_passes`` considers one after every
``FULL_PASS_EVERY`` such collections instead: 11 in the same 2,000 searches, the slowest
cold search 172 ms (275 before), RSS unchanged (560 MB). The young generations are collected
as often as before, so short-lived cycles are freed as soon; a cycle that outlives them waits
longer for a full pass.
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger("memstream.heap")

# Collections of the middle generation between two full passes considered (CPython: 10).
FULL_PASS_EVERY = 100


def freeze_startup_objects() -> int:
    """Collect once, then freeze every object left; returns how many are frozen."""
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.debug("froze %d start-up objects out of the cyclic collector's passes", frozen)
    return frozen


def spread_full_passes() -> None:
    """Consider a full collection after every ``FULL_PASS_EVERY`` collections of the middle
    generation (the young generations' thresholds unchanged)."""
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_PASS_EVERY)
