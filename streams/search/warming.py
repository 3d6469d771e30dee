"""Warm the search caches of the most recently changed or searched cubes when a worker starts.

A search of a cube the worker has not searched since it started pays for what later
searches reuse: the cube's episodes read and indexed for turn ranking, and its vectors
loaded into the in-memory index in front of Milvus Lite, while both loads compete with
the search itself. On the dev-split cubes (bench/retrieval_quality.py) the first search
of each cube took 0.9-1.6 s against a p95 of about 0.2 s for the rest. So a worker loads
both for the ``search.warm_cubes`` cubes whose memories changed or that were searched last
(``streams/search/usage.py`` notes a search; no more than the caches hold:
``search.episode_index_cubes``, ``vector.lite_cache_max_cubes``), one at a time, in the
background, once it has started: a cube searched meanwhile just loads itself (the
caches share one load per cube). The lemma dictionary of keyword ranking is loaded first;
what was loaded is frozen out of the cyclic collector's passes (``streams/runtime/heap.py``).
A cube that fails to warm is logged and skipped; warming never fails the worker.
"""

from __future__ import annotations

import asyncio
import logging
import time

from memstream.sinks.vector.cache import CachedVectorStore
from memstream.streams.core import lexical
from memstream.streams.core.episode_index import indexes_for
from memstream.streams.runtime.heap import freeze_startup_objects
from memstream.streams.runtime.stage import Deps

log = logging.getLogger("memstream.search.warming")


async def warm_recent_cubes(deps: Deps, cubes: int) -> list[str]:
    """Load the search caches of the ``cubes`` most recently changed cubes; returns those
    warmed."""
    await asyncio.to_thread(lexical.warm)
    vectors = deps.store.vectors
    # no more than the caches hold: a cube warmed beyond them would push out one warmed before
    cubes = min(cubes, deps.settings.search.episode_index_cubes,
                vectors.max_cubes if isinstance(vectors, CachedVectorStore) else cubes)
    if cubes <= 0:
        return []
    started = time.perf_counter()
    try:
        recent = await deps.query.recent_cubes(cubes)
    except Exception as exc:  # noqa: BLE001 - warming is an optimisation, never a failure
        log.warning("search caches not warmed: the cubes could not be listed: %s", exc)
        return []
    warmed = []
    for cube in recent:
        try:
            if isinstance(vectors, CachedVectorStore):
                await vectors.warm(cube)
            indexes = indexes_for(deps.query, deps.settings.search, deps.foreground)
            await indexes.get(deps.query, cube)
        except Exception as exc:  # noqa: BLE001 - the cube loads on its first search instead
            log.warning("search caches of cube %s not warmed: %s", cube, exc)
            continue
        warmed.append(cube)
    if warmed:
        freeze_startup_objects()  # out of the cyclic collector's full passes
    log.info("warmed the search caches of %d cube%s in %.1fs", len(warmed),
             "" if len(warmed) == 1 else "s", time.perf_counter() - started)
    return warmed
