"""Which memories the ids a user gives name: the same rule for the command line and MCP."""

from __future__ import annotations

import pytest

from memstream.history.ids import NodeNotFound, match
from memstream.history.indexed import ambiguous
from memstream.topics.models import MemoryItem, MemoryMetadata

IDS = ["3f2a9c10-aaaa-5bbb-8ccc-000000000001", "7d41e2b0-aaaa-5bbb-8ccc-000000000002"]
NODES = [MemoryItem(id=i, memory=f"memory {n}", metadata=MemoryMetadata(
    user_id="alice", cube_id="alice", memory_type="LongTermMemory"))
    for n, i in enumerate(IDS)]


def test_full_ids_and_prefixes_of_eight_characters_name_memories() -> None:
    found = match("alice", [IDS[1], IDS[0][:8], IDS[0], "no-such-id", IDS[1][:6]], NODES)
    assert [n.id for n in found.nodes] == [IDS[1], IDS[0]]  # each once, in the order asked
    assert found.found[IDS[0][:8]].id == IDS[0]
    assert found.missing == ("no-such-id", IDS[1][:6])  # too short to be a prefix
    with pytest.raises(NodeNotFound, match=(
            rf"^no memory no-such-id, {IDS[1][:6]} in cube 'alice'; nothing deleted$")):
        found.require("deleted")
    assert [n.id for n in match("alice", [IDS[0][:8]], NODES).require()] == [IDS[0]]


def test_an_ambiguous_prefix_names_every_match_up_to_five() -> None:
    two = str(ambiguous("3f2a9c10", IDS, "of cube 'alice'"))
    assert two == (f"id prefix '3f2a9c10' matches several memories of cube 'alice': "
                   f"{IDS[0]}, {IDS[1]}; give more of the id")
    many = str(ambiguous("3f2a9c10", [f"3f2a9c10-{n}" for n in range(7)], "in the log"))
    assert "3f2a9c10-4; " not in many and "3f2a9c10-4 and 2 more; give more" in many
