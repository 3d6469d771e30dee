"""Command agent: ``memory.commands`` → stores, ``memory.updates``."""

from __future__ import annotations

from memstream.streams.app import register_stage
from memstream.streams.commands.logic import STAGE, run_commands
from memstream.streams.runtime.batches import BoundTopics
from memstream.streams.runtime.stage import Deps, StageStats
from memstream.topics.registry import MEMORY_COMMANDS


def register(bound: BoundTopics, deps: Deps) -> StageStats:
    return register_stage(bound, deps, MEMORY_COMMANDS, STAGE, "commands", run_commands)
