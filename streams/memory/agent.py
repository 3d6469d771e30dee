"""Add stage agent: ``memory.items`` → graph + vectors, ``memory.updates``, ``reorganize.*``."""

from __future__ import annotations

from memstream.streams.app import register_stage
from memstream.streams.memory.logic import STAGE, add_memories
from memstream.streams.runtime.batches import BoundTopics
from memstream.streams.runtime.stage import Deps, StageStats
from memstream.topics.registry import MEMORY_ITEMS


def register(bound: BoundTopics, deps: Deps) -> StageStats:
    return register_stage(bound, deps, MEMORY_ITEMS, STAGE, "memory-add", add_memories)
