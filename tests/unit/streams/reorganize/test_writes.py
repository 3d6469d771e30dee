"""What the optimizer's handlers share when they write (streams/reorganize/writes.py): edges
land on the nodes that hold their ends' edges, even when the add stage, running beside the
optimizer, merged an end away between the decision and the write."""

from __future__ import annotations

from pathlib import Path

from memstream.streams.reorganize.writes import holder_of, write_edges
from memstream.streams.runtime.stage import Deps
from memstream.topics.models import LINEAGE_EDGE_TYPES, Edge, MemoryItem
from tests.support.doubles import memory_deps, remember

CUBE = "classes"


async def merge_away(deps: Deps, old: MemoryItem, kept: MemoryItem) -> None:
    """What the add stage's merge does to the graph: the decision, the archived node, its
    moving edges onto the kept one."""
    await deps.store.add_edges(CUBE, [Edge(source=old.id, target=kept.id, type="MERGED_TO")])
    [vector] = [r.vector for r in await deps.query.vectors(CUBE, [old.id])]
    await deps.store.write([(old.evolve(status="archived"), vector)])
    await deps.store.redirect_edges(CUBE, [old.id], kept.id, exclude=sorted(LINEAGE_EDGE_TYPES))


async def test_an_edge_decided_before_its_end_was_merged_lands_on_the_kept_node(
        tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    pune, lagos, again = await remember(
        deps, CUBE, "I signed up for a class in Pune.", "I signed up for a class in Lagos.",
        "Dara: I signed up for a class in Pune.")
    # the optimizer decided pune—lagos while pune was live; the add stage then merged pune
    # into its repeat before the optimizer wrote the edge
    await merge_away(deps, pune, again)
    await write_edges(deps, CUBE, [Edge(source=pune.id, target=lagos.id, type="RELATE_TO"),
                                   Edge(source=lagos.id, target=pune.id, type="AGGREGATE_TO")])
    assert await deps.query.edge_exists(CUBE, again.id, lagos.id, "RELATE_TO")
    assert await deps.query.edge_exists(CUBE, lagos.id, again.id, "AGGREGATE_TO")
    assert not await deps.query.edge_exists(CUBE, pune.id, lagos.id, "RELATE_TO")
    assert not await deps.query.edge_exists(CUBE, lagos.id, pune.id, "AGGREGATE_TO")
    # the decision itself stays where it was made
    assert await deps.query.edge_exists(CUBE, pune.id, again.id, "MERGED_TO")


async def test_the_holder_follows_a_chain_of_merges_and_a_live_node_has_none(
        tmp_path: Path) -> None:
    deps = memory_deps(tmp_path)
    first, second, third = await remember(deps, CUBE, "A class in Pune.", "A class in Pune!",
                                          "Dara: a class in Pune.")
    assert await holder_of(deps, CUBE, first.id) is None
    await merge_away(deps, first, second)
    await merge_away(deps, second, third)
    assert await holder_of(deps, CUBE, first.id) == third.id
    assert await holder_of(deps, CUBE, second.id) == third.id
