"""How the command line shows memories (memstream/cli/actions.py)."""

from __future__ import annotations

from datetime import UTC, datetime

from rich.console import Console

from memstream.cli.actions import print_nodes
from memstream.topics.models import MemoryItem, MemoryMetadata

SAID = datetime(2026, 3, 2, 9, tzinfo=UTC)


def node(node_id: str, text: str, **meta: object) -> MemoryItem:
    return MemoryItem(id=node_id, memory=text, metadata=MemoryMetadata(
        user_id="lea", cube_id="lea", memory_type="LongTermMemory", created_at=SAID,
        updated_at=SAID, **meta))  # type: ignore[arg-type]


def shown(width: int, rows: list[tuple[MemoryItem, float | None]]) -> str:
    console = Console(width=width, record=True)
    print_nodes(console, rows, "2 results")
    return console.export_text()


def test_a_memory_that_stopped_holding_says_until_when_and_what_replaced_it() -> None:
    berlin = node("e6489155-0000", "I moved from Lyon to Berlin.")
    lyon = node("3a4c3fd7-0000", "I moved to Lyon last month.",
                valid_until=datetime(2026, 4, 1, tzinfo=UTC), superseded_by=berlin.id)
    for width in (80, 160):  # one block each, or a table
        out = shown(width, [(berlin, 0.4), (lyon, 0.4)])
        assert "held until 2026-04-01, replaced by e6489155" in out, out
        assert out.count("held until") == 1  # the current one says nothing of the kind


def test_hits_of_several_cubes_say_which_cube_each_came_from() -> None:
    mine = node("a1b2c3d4-0000", "I am vegetarian.")
    shared = MemoryItem(id="f00dbabe-0000", memory="Carol lives in Oslo.",
                        metadata=MemoryMetadata(user_id="carol", cube_id="team",
                                                memory_type="LongTermMemory", created_at=SAID,
                                                updated_at=SAID))
    for width in (80, 160):
        out = shown(width, [(shared, 0.9), (mine, 0.5)])
        assert "team" in out and "lea" in out, out
        alone = shown(width, [(mine, 0.5)])
        assert "cube" not in alone, alone  # one cube: nothing to tell apart
