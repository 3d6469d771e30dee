"""Which memories the ids a user gives name: the one resolver of the command line and the MCP
tools, so both take the same ids and prefixes and fail the same way.

An id names a memory by its full id, or by a prefix of at least ``MIN_PREFIX`` characters
(what ``list``, ``as-of`` and ``explain`` print) that starts exactly one id the cube's log
names. The worker's ``get`` matches prefixes through the provenance index; ``history`` and
``explain`` match them there too (``indexed.resolve``), since they also read memories the
stores no longer hold. An id that names nothing is ``NodeNotFound``; a prefix naming several
memories is ``AmbiguousId``, naming them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from memstream.history.indexed import MIN_PREFIX, AmbiguousId, ambiguous, prefix_matches
from memstream.history.provenance import NodeNotFound
from memstream.topics.models import MemoryItem

if TYPE_CHECKING:
    from memstream.client.client import MemoryClient

AMBIGUOUS = "AmbiguousPrefix"  # the error type of a get whose prefix names several memories

__all__ = ["MIN_PREFIX", "AmbiguousId", "NodeNotFound", "Resolved", "match", "stored"]


@dataclass(frozen=True)
class Resolved:
    """What the asked ids name: each found id with its memory, in the order asked, and the
    ids that name none."""

    cube_id: str
    found: dict[str, MemoryItem]
    missing: tuple[str, ...]

    @property
    def nodes(self) -> list[MemoryItem]:
        """The memories named, each once, in the order asked."""
        return list({n.id: n for n in self.found.values()}.values())

    def require(self, nothing: str | None = None) -> list[MemoryItem]:
        """The memories, or ``NodeNotFound`` naming every id that names none (and, with
        ``nothing``, what was therefore not done: "nothing deleted")."""
        if self.missing:
            done = f"; nothing {nothing}" if nothing else ""
            raise NodeNotFound(f"no memory {', '.join(self.missing)} in cube "
                               f"'{self.cube_id}'{done}")
        return self.nodes


def match(cube_id: str, ids: Sequence[str], nodes: Sequence[MemoryItem]) -> Resolved:
    """Each id's memory among ``nodes``: the one with that id, else (for a prefix of at least
    ``MIN_PREFIX`` characters) the one it starts. Repeated ids count once."""
    found: dict[str, MemoryItem] = {}
    missing: list[str] = []
    for i in dict.fromkeys(ids):
        node = next((n for n in nodes if n.id == i), None)
        if node is None and len(i) >= MIN_PREFIX:
            node = next((n for n in nodes if n.id.startswith(i)), None)
        if node is None:
            missing.append(i)
        else:
            found[i] = node
    return Resolved(cube_id, found, tuple(missing))


async def stored(client: MemoryClient, user_id: str, cube_id: str,
                 ids: Sequence[str]) -> Resolved:
    """The memories of the cube ``ids`` name, read as ``user_id`` (whose read check applies:
    a refusal is the service's ``MemoryServiceError``)."""
    from memstream.client.client import MemoryServiceError

    try:
        nodes = await client.get(user_id, ids, cube_id=cube_id)
    except MemoryServiceError as exc:
        if exc.type != AMBIGUOUS:
            raise
        for i in dict.fromkeys(i for i in ids if len(i) >= MIN_PREFIX):
            if len(matches := await prefix_matches(client, cube_id, i)) > 1:
                raise ambiguous(i, matches, f"of cube {cube_id!r}") from None
        raise AmbiguousId(exc.message) from None
    return match(cube_id, ids, nodes)
