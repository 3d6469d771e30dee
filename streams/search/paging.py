"""One page of a cube's nodes (``get_all``), read from the store page by page.

The nodes are listed type by type (``MEMORY_TYPES`` order), each type newest first. A
page asks the store for the counts of every type, then only for the nodes of the page
(SKIP/LIMIT in the store), so listing a cube of 10,000 nodes in pages of 500 reads each
node once instead of the whole cube for every page.
"""

from __future__ import annotations

from collections.abc import Sequence

from memstream.streams.runtime.stage import Deps
from memstream.topics.models import MemoryItem, MemoryType, Status


async def page_of_types(
    deps: Deps, cube_id: str, types: Sequence[MemoryType], status: Status | None,
    offset: int, limit: int,
) -> tuple[list[MemoryItem], int]:
    """Nodes ``offset`` to ``offset + limit`` of the listing, and its total length."""
    counts = await deps.query.count_by_type(cube_id, status)
    total = sum(counts.get(t, 0) for t in types)
    nodes: list[MemoryItem] = []
    start = 0  # where the current type starts in the listing
    for memory_type in types:
        size = counts.get(memory_type, 0)
        want = limit - len(nodes)
        if want <= 0:
            break
        first = max(offset + len(nodes) - start, 0)
        if size and first < size:
            nodes += await deps.query.all_of_type(cube_id, memory_type, status, skip=first,
                                                  limit=want)
        start += size
    return nodes, total
