"""Extraction agent: ``conversations`` → ``memory.items``."""

from __future__ import annotations

from streams.app import BoundTopics, register_stage
from streams.extraction.logic import STAGE, extract
from streams.runtime import Deps, StageStats
from topics.registry import CONVERSATIONS


def register(bound: BoundTopics, deps: Deps) -> StageStats:
    return register_stage(bound, deps, CONVERSATIONS, STAGE, "extraction", extract)
