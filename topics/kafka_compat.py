"""A workaround for brokers that answer empty fetches at once.

noida-db (the embedded default) ignores ``fetch.max.wait.ms``: a fetch with nothing to
return comes back immediately, so every idle aiokafka consumer would spin at ~80% of a
core (measured; tansu and Apache Kafka long-poll as they should). Pausing after an empty
fetch bounds that, at the cost of up to the pause in delivery latency.

The pause adapts. A consumer that received records within the last ``busy_window_s`` is
busy (a stream of search requests, a conversation being ingested) and pauses only
``busy_pause_s``, so each hop of a request/reply round trip costs well under a
millisecond of waiting. An idle consumer pauses longer, keeping idle CPU low: ``pause_s``
if it was marked latency-sensitive (the request lane, a client's replies: someone is
waiting on them), ``background_pause_s`` otherwise (the stages' consumer, progress
readers). Polling is not free on two cores: the stages' consumer polling every 5 ms
while idle slowed a concurrent search by ~4 ms (p50), mostly in the query embedding.
Idle pauses are jittered: two consumers with the same fixed pause lock into step, and a
request then arrives just after the server's fetch came back empty, every time
(measured: the full pause on every hop). With a broker that long-polls, an empty
fetch already took ``fetch.max.wait.ms``, so none of this changes anything there.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.consumer.fetcher import Fetcher

from topics.settings import KafkaSettings


@dataclass
class FetchPause:
    pause_s: float = 0.0  # after an empty fetch, when idle (latency-sensitive consumers)
    busy_pause_s: float = 0.0  # after an empty fetch, when records came recently
    busy_window_s: float = 0.0
    background_pause_s: float = 0.0  # after an empty fetch, when idle (other consumers)

    def after_empty(self, now: float, last_data: float | None, latency: bool = True) -> float:
        idle = self.pause_s if latency else max(self.pause_s, self.background_pause_s)
        if last_data is not None and now - last_data < self.busy_window_s:
            return min(self.busy_pause_s, idle)
        return idle * random.uniform(0.5, 1.5)  # noqa: S311 - jitter, not security


_pause = FetchPause()
_original: dict[str, Any] = {}


def pause_empty_fetches(pause_s: float, busy_pause_s: float | None = None,
                        busy_window_s: float = 0.0, background_pause_s: float | None = None,
                        ) -> None:
    """Make every aiokafka consumer of this process pause after an empty fetch: when idle,
    ``pause_s`` if marked latency-sensitive, else ``background_pause_s`` (both jittered
    ±50%); ``busy_pause_s`` within ``busy_window_s`` of its last records. Process-wide and
    idempotent; ``pause_s=0`` restores the plain behaviour."""
    _pause.pause_s = pause_s
    _pause.busy_pause_s = pause_s if busy_pause_s is None else busy_pause_s
    _pause.busy_window_s = busy_window_s
    _pause.background_pause_s = pause_s if background_pause_s is None else background_pause_s
    if _original:
        return
    original = Fetcher._proc_fetch_request
    _original["fetch"] = original

    async def fetch_then_pause(self: Fetcher, assignment: Any, node_id: int, request: Any) -> Any:
        got_data = await original(self, assignment, node_id, request)
        now = asyncio.get_running_loop().time()
        if got_data:
            self._memstream_last_data = now
        elif _pause.pause_s > 0:
            delay = _pause.after_empty(now, getattr(self, "_memstream_last_data", None),
                                       getattr(self, "_memstream_latency", False))
            try:
                await asyncio.sleep(delay)
            except asyncio.CancelledError:
                return got_data  # the consumer is closing: end like the plain fetch would
        return got_data

    Fetcher._proc_fetch_request = fetch_then_pause


def configure_fetch_pause(kafka: KafkaSettings) -> None:
    """``pause_empty_fetches`` as the settings say."""
    pause_empty_fetches(kafka.empty_fetch_pause_s, kafka.busy_fetch_pause_s, kafka.busy_window_s,
                        kafka.background_fetch_pause_s)


def mark_latency_sensitive(consumer: AIOKafkaConsumer) -> None:
    """After ``consumer.start()``: someone waits on what it reads, so its idle pause is the
    short one."""
    fetcher = getattr(consumer, "_fetcher", None)
    if fetcher is None:
        raise RuntimeError("mark a consumer latency-sensitive after starting it")
    fetcher._memstream_latency = True
