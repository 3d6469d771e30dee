"""memstream: long-term memory for LLM agents as a Kafka event-streaming pipeline.

The public surface: ``Settings``, ``MemoryClient``, its errors, the events an
application publishes (commands) or reads (updates, dead letters), and the context block
(``ContextBlock``, ``render_context``: search hits as a prompt's text).
"""

from pathlib import Path as _Path

from memstream._links import check_links as _check_links

_check_links(_Path(__file__).parent)  # before the first import through a link

# isort: off
from memstream.client.client import ClientError, LimitExceeded, MemoryClient, MemoryServiceError  # noqa: E402
from memstream.topics.context import ContextBlock, render_context  # noqa: E402
from memstream.topics.events import (  # noqa: E402
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
from memstream.topics.models import MemoryItem  # noqa: E402
from memstream.topics.settings import Settings  # noqa: E402
# isort: on

__all__ = [
    "BackupCube",
    "ClientError",
    "ContextBlock",
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
    "render_context",
]
__version__ = "0.1.0"
