"""Answer a ``log_refs`` request from the provenance index (``sinks/log_refs.py``).

The reply holds positions and ids, never text: the records themselves are read by the
asker, with the cube's key. So it is answered without the cube's read check (the history
and explain commands name a memory, not a user), and for the cube asked for, not its view.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from memstream.history.log_index import LogRefQuery
from memstream.streams.runtime.stage import Deps
from memstream.topics.events import LogRefsRequest, LogRefsResult
from memstream.topics.models import MemoryItem


async def log_refs_result(req: LogRefsRequest, deps: Deps) -> LogRefsResult:
    cube = None if req.any_cube else req.cube_id
    query = LogRefQuery(cube_id=cube, node_id=req.node_id, node_prefix=req.node_prefix,
                        event_ids=req.event_ids, topic=req.topic, node_less=req.node_less)
    refs = await deps.store.graph.log_refs(query)
    if req.node_prefix is not None:
        return LogRefsResult(nodes=tuple((r.cube_id, r.node_id) for r in refs))
    positions: dict[str, set[int]] = defaultdict(set)
    for ref in refs:
        positions[f"{ref.topic}|{ref.partition}"].add(ref.offset)
    nodes = tuple(sorted({(r.cube_id, r.node_id) for r in refs if r.node_id}))
    return LogRefsResult(positions={k: tuple(sorted(v)) for k, v in positions.items()},
                         nodes=nodes if req.node_id is not None else ())


MIN_PREFIX = 8  # as-of and explain print the first 8 characters of an id


class AmbiguousPrefix(ValueError):
    """An id prefix that names more than one memory of the cube."""


async def nodes_by_ids_or_prefixes(deps: Deps, cube_id: str,
                                   ids: Sequence[str]) -> list[MemoryItem]:
    """The cube's nodes with these ids; an id not found that is at least 8 characters long
    is taken as a prefix, which must name exactly one memory of the cube."""
    nodes = await deps.query.get_nodes(cube_id, ids)
    found = {n.id for n in nodes}
    resolved: list[str] = []
    for prefix in dict.fromkeys(i for i in ids if i not in found and len(i) >= MIN_PREFIX):
        matches = await deps.store.graph.log_refs(LogRefQuery(cube_id=cube_id,
                                                              node_prefix=prefix))
        if len(matches) > 1:
            shown = ", ".join(m.node_id for m in matches[:2])
            raise AmbiguousPrefix(f"id prefix {prefix!r} matches several memories of cube "
                                  f"{cube_id!r} ({shown}, …); give more of the id")
        resolved += [m.node_id for m in matches if m.node_id not in found]
    return nodes + (await deps.query.get_nodes(cube_id, resolved) if resolved else [])
