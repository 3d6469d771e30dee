"""A workaround for brokers that answer empty fetches at once.

noida-db (the embedded default) ignores ``fetch.max.wait.ms``: a fetch with nothing to
return comes back immediately, so every idle aiokafka consumer would spin at ~80% of a
core (measured; tansu and Apache Kafka long-poll as they should). Pausing briefly after
an empty fetch bounds that, at the cost of at most the pause in delivery latency. With a
broker that long-polls, an empty fetch already took ``fetch.max.wait.ms``, so the pause
changes nothing there.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka.consumer.fetcher import Fetcher

_state: dict[str, Any] = {"pause_s": 0.0, "original": None}


def pause_empty_fetches(pause_s: float) -> None:
    """Make every aiokafka consumer of this process pause ``pause_s`` after an empty fetch
    (process-wide and idempotent; 0 restores the plain behaviour)."""
    _state["pause_s"] = pause_s
    if _state["original"] is not None:
        return
    original = Fetcher._proc_fetch_request
    _state["original"] = original

    async def fetch_then_pause(self: Fetcher, assignment: Any, node_id: int, request: Any) -> Any:
        got_data = await original(self, assignment, node_id, request)
        if not got_data and _state["pause_s"] > 0:
            try:
                await asyncio.sleep(_state["pause_s"])
            except asyncio.CancelledError:
                return got_data  # the consumer is closing: end like the plain fetch would
        return got_data

    Fetcher._proc_fetch_request = fetch_then_pause
