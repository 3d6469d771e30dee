"""The optimizer's work done in line, for a replay: the same events in log order, with the
optimizer's windows of event time kept as the live worker keeps them."""

from __future__ import annotations

from memstream.streams.reorganize.logic import on_add, on_merge, on_remove
from memstream.streams.reorganize.optimize import Scopes, run_windows
from memstream.streams.runtime.stage import Deps
from memstream.topics.events import ReorganizeEvent


class InlineOptimizer:
    """Applies reorganize events as they come (their announcements are not published)."""

    def __init__(self) -> None:
        self.scopes = Scopes()

    async def apply(self, event: ReorganizeEvent, deps: Deps) -> None:
        match event.op:
            case "add":
                await run_windows(deps, self.scopes, event)
                await on_add(event, deps)
            case "remove":
                await on_remove(event, deps)
            case "merge":
                await on_merge(event, deps)
            case "end":  # the live optimizer's end-of-log pass; a replay's windows cover it
                pass
