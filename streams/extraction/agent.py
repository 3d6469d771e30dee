"""Extraction agent: ``conversations`` → ``memory.items``."""

from __future__ import annotations

from memstream.streams.app import register_stage
from memstream.streams.extraction.logic import STAGE, extract
from memstream.streams.runtime.batches import BoundTopics
from memstream.streams.runtime.stage import Deps, StageStats
from memstream.topics.registry import CONVERSATIONS


def register(bound: BoundTopics, deps: Deps) -> StageStats:
    return register_stage(bound, deps, CONVERSATIONS, STAGE, "extraction", extract)
