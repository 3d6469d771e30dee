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
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger("memstream.heap")


def freeze_startup_objects() -> int:
    """Collect once, then freeze every object left; returns how many are frozen."""
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.debug("froze %d start-up objects out of the cyclic collector's passes", frozen)
    return frozen
