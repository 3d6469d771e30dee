"""memstream: long-term memory for LLM agents as a Kafka event-streaming pipeline.

The public surface: ``Settings`` and ``MemoryClient``.
"""

from topics.client import ClientError, MemoryClient
from topics.events import WriteToken
from topics.settings import Settings

__all__ = ["ClientError", "MemoryClient", "Settings", "WriteToken"]
__version__ = "0.1.0"
