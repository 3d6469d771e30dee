"""memstream: long-term memory for LLM agents as a Kafka event-streaming pipeline.

The public surface: ``Settings``, ``MemoryClient``, its errors, and the events an
application publishes (commands) or reads (updates, dead letters).
"""

from memstream.topics.client import ClientError, LimitExceeded, MemoryClient, MemoryServiceError
from memstream.topics.events import (
    BackupCube,
    DeadLetter,
    DeleteCube,
    DeleteNodes,
    DropViews,
    DumpCube,
    FreezeNodes,
    LifecycleSweep,
    LoadCube,
    MemoryUpdate,
    PromoteCube,
    ReplaceWorkingMemory,
    ReplayCube,
    ScoredMemory,
    ShareCube,
    UnfreezeNodes,
    UnshareCube,
    UpdateNode,
    WriteToken,
)
from memstream.topics.models import MemoryItem
from memstream.topics.settings import Settings

__all__ = [
    "BackupCube",
    "ClientError",
    "DeadLetter",
    "DeleteCube",
    "DeleteNodes",
    "DropViews",
    "DumpCube",
    "FreezeNodes",
    "LifecycleSweep",
    "LimitExceeded",
    "LoadCube",
    "MemoryClient",
    "MemoryItem",
    "MemoryServiceError",
    "MemoryUpdate",
    "PromoteCube",
    "ReplaceWorkingMemory",
    "ReplayCube",
    "ScoredMemory",
    "Settings",
    "ShareCube",
    "UnfreezeNodes",
    "UnshareCube",
    "UpdateNode",
    "WriteToken",
]
__version__ = "0.1.0"
