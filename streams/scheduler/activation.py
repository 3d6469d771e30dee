"""Activation memory: a cube's working memory as a ready-to-prepend block.

At an interval, every cube with scheduler activity since its last render gets its
working memory rendered and published on ``activation-memory``, so an agent can
prepend it to a prompt without a search. It is the context block of a search
(``topics/context.py``), with the working memory's items as hits in its order: each with
its id, its date, an episode's turns with their times and speakers, within
``scheduler.activation_budget`` characters.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from memstream.streams.core.working_memory import Entry
from memstream.streams.runtime.stage import Deps, Outgoing
from memstream.streams.scheduler.planning import current_working_memory
from memstream.streams.scheduler.state import CubeState
from memstream.topics.context import ACTIVATION_HEADER, ContextBlock, render_context
from memstream.topics.events import ActivationMemory
from memstream.topics.ids import derived_event_id
from memstream.topics.models import MemoryItem, MemoryMetadata
from memstream.topics.registry import ACTIVATION_MEMORY

HEADER = ACTIVATION_HEADER


def render_activation(items: Sequence[MemoryItem], budget: int,
                      header: str = HEADER) -> ContextBlock:
    """``header`` then the items as a context block (text "" when there are none)."""
    return render_context([i for i in items if i.memory.strip()], budget, header=header,
                          empty="")


def as_items(entries: Sequence[Entry], nodes: Sequence[MemoryItem], user_id: str,
             cube_id: str) -> list[MemoryItem]:
    """Working memory's entries as memories: each its text, under the id it names (``ref``),
    with the stored memory's metadata (dates, validity, sources) when the store has it."""
    by_id = {n.id: n for n in nodes}
    return [by_id[e.ref].model_copy(update={"memory": e.text}) if e.ref in by_id else
            MemoryItem(id=e.ref, memory=e.text, metadata=MemoryMetadata(
                user_id=user_id, cube_id=cube_id, memory_type="WorkingMemory"))
            for e in entries]


def due_for_render(states: Iterable[CubeState], rendered: dict[bytes, datetime],
                   since: datetime) -> list[CubeState]:
    """Cubes active since their last render (or, never rendered here, since ``since``)."""
    return [s for s in states if s.last_activity_at > rendered.get(s.key, since)]


async def activation_event(deps: Deps, state: CubeState) -> Outgoing | None:
    """The rendered block of one cube; None when its working memory is empty."""
    now = deps.clock()
    entries = await current_working_memory(deps, state.cube_id, state.replacement, now)
    nodes = await deps.query.get_nodes(state.cube_id, [e.ref for e in entries])
    block = render_activation(as_items(entries, nodes, state.user_id, state.cube_id),
                              deps.settings.scheduler.activation_budget)
    if not block.text:
        return None
    event = ActivationMemory(
        event_id=derived_event_id("activation", state.user_id, state.cube_id,
                                  state.last_activity_at),
        user_id=state.user_id, cube_id=state.cube_id, occurred_at=now, text=block.text,
        node_ids=block.ids)
    return Outgoing(ACTIVATION_MEMORY, event)
