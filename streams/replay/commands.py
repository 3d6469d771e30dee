"""The replay commands of ``memory.commands``: replay, promote, drop_views."""

from __future__ import annotations

from memstream.streams.replay.logic import replay_cube
from memstream.streams.replay.stages import ReplayStages
from memstream.streams.runtime.stage import Deps, Outgoing, PermanentError
from memstream.topics.events import DropViews, Event, MemoryUpdate, PromoteCube, ReplayCube
from memstream.topics.ids import derived_event_id
from memstream.topics.registry import CUBE_VIEWS, MEMORY_UPDATES

STAGE = "commands"


class ViewRefused(PermanentError):
    """A promote to a view that does not exist."""


async def promote(cmd: PromoteCube, deps: Deps) -> list[Outgoing]:
    """Check the view holds memories, then write the switch readers follow."""
    if cmd.view != cmd.cube_id:
        counts = await deps.query.count_by_type(cmd.view, status=None)
        if not any(counts.values()):
            raise ViewRefused(f"promote {cmd.cube_id}: cube {cmd.view!r} has no memories")
    if deps.views is not None:  # this worker switches at once; the others from the topic
        deps.views.apply(cmd)
    return [Outgoing(CUBE_VIEWS, cmd), Outgoing(MEMORY_UPDATES, MemoryUpdate(
        event_id=derived_event_id("promoted", cmd.event_id), user_id=cmd.user_id,
        cube_id=cmd.cube_id, occurred_at=deps.clock(), action="promoted", stage=STAGE,
        related_ids=(cmd.view,), reason=f"reads of {cmd.cube_id} now go to {cmd.view}",
        cause_event_id=cmd.event_id))]


async def drop_views(cmd: DropViews, deps: Deps) -> list[Outgoing]:
    nodes, vectors = await deps.store.clear_cube(cmd.cube_id)
    return [Outgoing(MEMORY_UPDATES, MemoryUpdate(
        event_id=derived_event_id("views-dropped", cmd.event_id), user_id=cmd.user_id,
        cube_id=cmd.cube_id, occurred_at=deps.clock(), action="deleted", stage=STAGE,
        reason=f"views dropped: {nodes} nodes, {vectors} vectors (the log is kept)",
        cause_event_id=cmd.event_id))]


class ReplayCommands:
    """The ``replay``, ``promote`` and ``drop_views`` commands, with the stages a replay runs
    (handed to the command stage through ``Deps.command_handlers``)."""

    def __init__(self, stages: ReplayStages) -> None:
        self.stages = stages

    async def run(self, cmd: Event, deps: Deps) -> list[Outgoing]:
        return await run_replay_command(cmd, deps, self.stages)


async def run_replay_command(cmd: Event, deps: Deps, stages: ReplayStages) -> list[Outgoing]:
    match cmd:
        case ReplayCube():
            return await replay_cube(cmd, deps, stages)
        case PromoteCube():
            return await promote(cmd, deps)
        case DropViews():
            return await drop_views(cmd, deps)
    raise ValueError(f"not a replay command: {type(cmd).__name__}")
