"""What a write command reads before it publishes, and how it reports a refused write.

A write command reads the cube first (does the id exist, how many memories are there), but
that read must not answer for the write: a user who may not read a cube may not write it
either, and the refusal the user sees is the worker's write check ("may not write"). Ids
are checked here so an unknown id is the user's mistake (exit 2) for every write command.
"""

from __future__ import annotations

from collections.abc import Sequence

from memstream.client.client import MemoryClient, MemoryServiceError
from memstream.history.ids import AmbiguousId, stored
from memstream.topics.events import DeadLetter, WriteToken
from memstream.topics.registry import DEAD_LETTER
from memstream.topics.settings import Settings

READ_REFUSED = "AccessDenied"  # the error type of a request the cube's access check refused


async def resolve_ids(settings: Settings, ids: Sequence[str], user_id: str, cube: str,
                      nothing: str) -> tuple[str, ...]:
    """The full ids of the memories ``ids`` name (``memstream/history/ids.py``, as ``get``
    and the MCP tools take them); one naming none is ``NodeNotFound`` naming it and the cube
    ("…; nothing ``nothing``"), a prefix naming several ``AmbiguousId``: both exit 2. When
    the user may not read the cube, ``ids`` unchanged: the worker's write check then refuses
    the write itself."""
    try:
        async with MemoryClient(settings) as client:
            resolved = await stored(client, user_id, cube, ids)
    except MemoryServiceError as exc:
        if exc.type == READ_REFUSED:
            return tuple(ids)
        raise
    except AmbiguousId as exc:
        raise AmbiguousId(f"{exc}; nothing {nothing}") from None
    return tuple(n.id for n in resolved.require(nothing))


def read_refused(exc: MemoryServiceError) -> bool:
    """A read the cube's access check refused (so a write by that user will be refused too)."""
    return exc.type == READ_REFUSED


async def refusals(client: MemoryClient, tokens: Sequence[WriteToken]) -> list[str]:
    """The worker's reasons for refusing any of these writes (their dead letters)."""
    where = {(t.topic, t.partition, t.offset) for t in tokens}
    return [letter.error for letter in await client.history(DEAD_LETTER)
            if isinstance(letter, DeadLetter) and (
                letter.original_topic, letter.original_partition, letter.original_offset)
            in where]
