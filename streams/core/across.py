"""One search over several cubes: one ranking, one score scale, every turn once.

A caller may read several cubes for one question — a user's own and a shared one, both
speakers' cubes of a conversation. Each cube is searched as it would be alone (the query
embedded and its goal parsed once for all), and the hits are merged on the worker:

- **One scale.** A cube's scores are relative to that cube's candidates: first place in
  every ranking it fuses scores 1, so the best hit of a cube that holds nothing on the
  question scores as high as the answer in another cube. Each cube's hits are therefore
  weighted by how its best evidence stands among all the cubes' (``cosine_standing``, the
  same measure and the recipe's ``boosts.cosine_spread`` a single search applies to its
  candidates): the cosine of each hit's memory with the query, the cube's best against the
  median and the best of every hit returned. A cube whose best hit is as close as any keeps
  its scores; one whose best lies at or below the median is weighted by
  ``1 - cosine_spread``. Within a cube the order is the cube's own.
- **Distinct evidence.** Two cubes that hold the same turns (both speakers') return the
  same excerpts: ``distinct`` joins them, as it does within a cube.
- fine mode's reasoner picks once, from the merged shortlist.

Access is checked per cube before any is read (``streams/search/logic.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np

from memstream.sinks.ports import CubeRows
from memstream.streams.core.distinct import distinct
from memstream.streams.core.retrieval import (
    cosine_standing,
    dedupe,
    prepare,
    reason,
    search,
)
from memstream.streams.runtime.stage import Deps
from memstream.topics.events import ScoredMemory, SearchRequest


async def search_cubes(req: SearchRequest, deps: Deps) -> tuple[list[ScoredMemory], str,
                                                                 dict[str, str]]:
    """The memories of every cube ``req`` names, best first, the mode used, and the cube
    each returned memory was found in (by id)."""
    cubes = req.cubes
    if len(cubes) == 1:
        found, mode = await search(req, deps)
        return found, mode, {s.item.id: req.cube_id for s in found}
    # the query is embedded once for every cube, while each cube's word recalls run
    preparing = asyncio.ensure_future(prepare(req, deps, cubes))
    one = [req.model_copy(update={"cube_id": cube, "cube_ids": ()}) for cube in cubes]
    try:
        replies = await asyncio.gather(*(search(r, deps, preparing, reasoned=False)
                                         for r in one))
    finally:
        if not preparing.done():  # a cube's search failed before it waited for it
            preparing.cancel()
            await asyncio.gather(preparing, return_exceptions=True)
    prepared = preparing.result()
    mode = replies[0][1]
    weights = await cube_weights(deps, cubes, [found for found, _ in replies],
                                 prepared.vectors[0])
    cube_of: dict[str, str] = {}
    merged: list[ScoredMemory] = []
    for cube, (found, _), weight in zip(cubes, replies, weights, strict=True):
        for hit in found:
            cube_of.setdefault(hit.item.id, cube)
            merged.append(hit if weight == 1.0 else
                          hit.model_copy(update={"score": round(hit.score * weight, 4)}))
    merged.sort(key=lambda s: -s.score)  # stable: a cube's own order where scores tie
    if mode == "fine":
        merged = dedupe(await reason(req, deps, merged))
    merged = distinct(merged)
    kept = [s for s in merged if s.score >= req.min_score][: req.top_k]
    return kept, mode, {s.item.id: cube_of[s.item.id] for s in kept}


async def cube_weights(deps: Deps, cubes: Sequence[str],
                       replies: Sequence[Sequence[ScoredMemory]],
                       query_vec: np.ndarray) -> list[float]:
    """Per cube, the factor that puts its scores on the scale of all (module docstring)."""
    stored = await asyncio.gather(*(
        deps.query.vector_rows(cube, [s.item.id for s in found]) if found else _none()
        for cube, found in zip(cubes, replies, strict=True)))
    per_cube = [(rows.vectors @ query_vec).tolist() if rows is not None and rows.records else []
                for rows in stored]
    everything = [c for cosines in per_cube for c in cosines]
    if not everything:
        return [1.0] * len(cubes)
    best = [max(cosines) if cosines else min(everything) for cosines in per_cube]
    return cosine_standing(best, deps.settings.search.ranking.boosts.cosine_spread,
                           among=everything)


async def _none() -> CubeRows | None:
    return None
