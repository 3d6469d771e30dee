"""Stalled partitions: records wait and the stage handles none of them.

faust's own detector logs an error for every partition whose stream took nothing, or
committed nothing, for ``stream_processing_timeout`` while records wait, every few seconds:
an optimizer working through a backlog (the most urgent topic first, partitions in turn)
was reported hundreds of times as "Stream stopped processing, or is slow", which an
operator cannot tell from a stage that really stopped. ``streams.app`` turns that detector
off; this check replaces it.

A partition of this worker is stalled when records wait on it (its end offset is past the
stage's committed offset) and none was handled (its committed offset has not moved) for
``worker.stall_after_s``. A stage taking partitions in turn must move each of them; the
optimizer's partitions move together (``together``): it serves its most urgent topic
first on purpose, so a less urgent partition waiting while it works is not stalled. A
stall is logged once, at ERROR, with the stage, topic, partition, the records waiting, for
how long nothing was handled and what the stage waits for; once the partition moves again
(or nothing waits any more) once more, at INFO. Checked on each lag sample of the worker's
metrics (``metrics.sample_interval_s``); ``memstream status`` shows the partitions stalled
now (the ``memstream_stall_seconds`` gauge).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memstream.streams.runtime.turns import pending

if TYPE_CHECKING:
    from memstream.kafka.admin import Position
    from memstream.streams.runtime.stage import StageStats

__all__ = ["Stall", "StallWatch"]

log = logging.getLogger("memstream.stalls")

Key = tuple[str, int]  # (topic, partition)


@dataclass(frozen=True)
class Stall:
    """A partition that has records waiting and has moved for none of them."""

    stage: str
    topic: str
    partition: int
    waiting: int  # records written and not handled
    idle_s: float  # how long none was handled while records waited
    waits_for: str  # what the stage is doing meanwhile, in words

    def __str__(self) -> str:
        return (f"{self.stage}: stalled on {self.topic}[{self.partition}]: {self.waiting} "
                f"records wait and none was handled for {self.idle_s:.0f}s; {self.waits_for}")


@dataclass(frozen=True)
class _Stage:
    name: str
    unit: str | None  # partitions of one unit move together (None: each partition alone)
    stats: StageStats | None


@dataclass
class _Partition:
    committed: int
    ok_at: float  # last sample with nothing waiting, its offset moving, or first seen
    waiting: int = 0
    moved_at: float | None = None  # last sample its committed offset moved


class StallWatch:
    """Stalled partitions of one worker's stages, from samples of the group's offsets.

    ``watch`` registers a stage's topics; ``observe`` takes one sample (the worker's app
    says which partitions are its own); ``update`` is the check itself, given the
    assignment, so it runs without an app."""

    def __init__(self, after_s: float, app: Any = None) -> None:
        self.after_s = after_s
        self.app = app  # a faust app (its assignment, rebalancing, pauses), or None
        self._stages: dict[str, _Stage] = {}  # topic -> its stage
        self._partitions: dict[Key, _Partition] = {}
        self._moved_at: dict[str, float] = {}  # unit -> last sample one of its partitions moved
        self._stalled: dict[Key, Stall] = {}

    def watch(self, stage: str, topics: Iterable[str], stats: StageStats | None = None, *,
              together: bool = False) -> None:
        """Check ``stage``'s partitions of ``topics``; ``together``: any of them moving
        counts for all (a stage that serves its topics by urgency, not in turn)."""
        for topic in topics:
            self._stages[topic] = _Stage(stage, stage if together else None, stats)

    @property
    def stalled(self) -> list[Stall]:
        """The partitions stalled now (as of the last sample)."""
        return [self._stalled[k] for k in sorted(self._stalled)]

    def observe(self, positions: Mapping[str, Mapping[int, Position]],
                now: float | None = None) -> None:
        """One sample of the group's offsets, checked against this worker's partitions."""
        now = time.monotonic() if now is None else now
        app = self.app
        if app is None:
            return
        if app.rebalancing:  # nothing is handled during a rebalance, by design
            for state in self._partitions.values():
                state.ok_at = now
            return
        assigned = {(tp.topic, tp.partition) for tp in app.consumer.assignment()}
        self.update(positions, assigned, now)

    def update(self, positions: Mapping[str, Mapping[int, Position]],
               assigned: Collection[Key], now: float) -> list[Stall]:
        """Check one sample; log the partitions that stalled or moved again since the last.
        Returns the partitions stalled now."""
        sample = {(topic, p): pos for topic, parts in positions.items()
                  for p, pos in parts.items()
                  if topic in self._stages and (topic, p) in assigned}
        for key in [k for k in self._partitions if k not in sample]:
            del self._partitions[key]  # revoked (another worker's now), or not sampled
            if (gone := self._stalled.pop(key, None)) is not None:
                log.info("%s: %s[%d] is no longer this worker's (it was stalled for %.0fs)",
                         gone.stage, gone.topic, gone.partition, gone.idle_s)
        for key, pos in sample.items():
            state = self._partitions.get(key)
            if state is None:
                self._partitions[key] = state = _Partition(pos.committed, now)
            elif pos.committed != state.committed:
                state.committed, state.ok_at = pos.committed, now
                state.moved_at = now
                if (unit := self._stages[key[0]].unit) is not None:
                    self._moved_at[unit] = now
            if pos.lag == 0:
                state.ok_at = now
            state.waiting = pos.lag
        for key, state in self._partitions.items():
            self._check(key, state, now)
        return self.stalled

    def _check(self, key: Key, state: _Partition, now: float) -> None:
        stage = self._stages[key[0]]
        since, moved = state.ok_at, state.moved_at
        if stage.unit is not None and (unit_moved := self._moved_at.get(stage.unit)) is not None:
            since, moved = max(since, unit_moved), unit_moved  # any of the unit's moving
        stalled = self._stalled.get(key)
        if state.waiting > 0 and now - since >= self.after_s:
            stall = Stall(stage.name, key[0], key[1], state.waiting, now - since,
                          stalled.waits_for if stalled else self._waits_for(key, stage))
            self._stalled[key] = stall
            if stalled is None:
                log.error("%s (worker.stall_after_s is %gs)", stall, self.after_s)
        elif stalled is not None:
            del self._stalled[key]
            how = "moves again" if moved == now else "has nothing waiting any more"
            log.info("%s: %s[%d] %s after %.0fs without handling a record (%d records wait)",
                     stage.name, key[0], key[1], how, stalled.idle_s, state.waiting)

    def _waits_for(self, key: Key, stage: _Stage) -> str:
        busy = stage.stats.in_flight if stage.stats is not None else 0
        if busy:
            return (f"{busy} batch{'es' if busy > 1 else ''} of the stage in progress: it "
                    "waits for its handler (a store, the model or the broker)")
        app = self.app
        held = pending(app).get(key, 0) if app is not None else 0
        if held:
            return f"{held} of them delivered to the stage and not taken: its runner is idle"
        paused = getattr(getattr(app, "consumer", None), "_paused_partitions", ())
        if any((tp.topic, tp.partition) == key for tp in paused):
            return "fetching from the partition is paused"
        return "none delivered to the stage: its consumer is not fetching them"
