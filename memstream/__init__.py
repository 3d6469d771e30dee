"""memstream: long-term memory for LLM agents as a Kafka event-streaming pipeline.

The public surface: ``Settings``, ``MemoryClient``, its errors, and the events an
application publishes (commands) or reads (updates, dead letters).
"""

from topics.client import ClientError, LimitExceeded, MemoryClient, MemoryServiceError
from topics.events import (
    BackupCube,
    DeadLetter,
    DeleteCube,
    DeleteNodes,
    DumpCube,
    LoadCube,
    MemoryUpdate,
    ReplaceWorkingMemory,
    ScoredMemory,
    UpdateNode,
    WriteToken,
)
from topics.models import MemoryItem
from topics.settings import Settings

__all__ = [
    "BackupCube",
    "ClientError",
    "DeadLetter",
    "DeleteCube",
    "DeleteNodes",
    "DumpCube",
    "LimitExceeded",
    "LoadCube",
    "MemoryClient",
    "MemoryItem",
    "MemoryServiceError",
    "MemoryUpdate",
    "ReplaceWorkingMemory",
    "ScoredMemory",
    "Settings",
    "UpdateNode",
    "WriteToken",
]
__version__ = "0.1.0"
