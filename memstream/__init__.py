"""memstream: long-term memory for LLM agents as a Kafka event-streaming pipeline.

The public surface: ``Settings`` and ``MemoryClient``.
"""

from topics.client import ClientError, LimitExceeded, MemoryClient, MemoryServiceError
from topics.events import WriteToken
from topics.settings import Settings

__all__ = ["ClientError", "LimitExceeded", "MemoryClient", "MemoryServiceError", "Settings",
           "WriteToken"]
__version__ = "0.1.0"
