"""Activation memory: a cube's working memory as a ready-to-prepend block.

At an interval, every cube with scheduler activity since its last render gets its
working memory rendered and published on ``activation-memory``, so an agent can
prepend it to a prompt without a search.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from memstream.streams.prompts.promptkit import clip
from memstream.streams.runtime.stage import Deps, Outgoing
from memstream.streams.scheduler.planning import current_working_memory
from memstream.streams.scheduler.state import CubeState
from memstream.topics.events import ActivationMemory
from memstream.topics.ids import derived_event_id
from memstream.topics.registry import ACTIVATION_MEMORY

HEADER = "Known about the user:"


def render_activation(texts: Sequence[str], header: str = HEADER) -> str:
    """``header`` then one ``- text`` line per memory (one line each), or "" when empty."""
    lines = [f"- {clip(t)}" for t in texts if t.strip()]
    return "\n".join([header, *lines]) if lines else ""


def due_for_render(states: Iterable[CubeState], rendered: dict[bytes, datetime],
                   since: datetime) -> list[CubeState]:
    """Cubes active since their last render (or, never rendered here, since ``since``)."""
    return [s for s in states if s.last_activity_at > rendered.get(s.key, since)]


async def activation_event(deps: Deps, state: CubeState) -> Outgoing | None:
    """The rendered block of one cube; None when its working memory is empty."""
    now = deps.clock()
    items = await current_working_memory(deps, state.cube_id, state.replacement, now)
    text = render_activation([e.text for e in items])
    if not text:
        return None
    event = ActivationMemory(
        event_id=derived_event_id("activation", state.user_id, state.cube_id,
                                  state.last_activity_at),
        user_id=state.user_id, cube_id=state.cube_id, occurred_at=now, text=text,
        node_ids=tuple(e.ref for e in items))
    return Outgoing(ACTIVATION_MEMORY, event)
