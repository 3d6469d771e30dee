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

Where it applies: a worker patches its own process (``pause_empty_fetches``: faust makes
its consumers); the client only ever patches the consumers it creates itself
(``pause_consumer``), so an application's own aiokafka consumers are left as they are.
Both only on the embedded broker (``needs_pause``: ``KAFKA__FETCH_PAUSE`` auto means a
loopback broker) and only on aiokafka versions whose private fetch method was checked
(``SUPPORTED_AIOKAFKA``); on any other version nothing is patched and a warning says so.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import random
import types
from dataclasses import dataclass
from typing import Any

import aiokafka
from aiokafka import AIOKafkaConsumer
from aiokafka.consumer.fetcher import Fetcher

from memstream.topics.settings import KafkaSettings


@dataclass
class FetchPause:
    pause_s: float = 0.0  # after an empty fetch, when idle (latency-sensitive consumers)
    busy_pause_s: float = 0.0  # after an empty fetch, when records came recently
    busy_window_s: float = 0.0
    background_pause_s: float = 0.0  # after an empty fetch, when idle (other consumers)
    background_busy_pause_s: float = 0.0  # after an empty fetch, when busy (other consumers)

    def after_empty(self, now: float, last_data: float | None, latency: bool = True) -> float:
        idle = self.pause_s if latency else max(self.pause_s, self.background_pause_s)
        if last_data is not None and now - last_data < self.busy_window_s:
            busy = self.busy_pause_s if latency else max(self.busy_pause_s,
                                                         self.background_busy_pause_s)
            return min(busy, idle)
        return idle * random.uniform(0.5, 1.5)  # noqa: S311 - jitter, not security


log = logging.getLogger("memstream.kafka")

# aiokafka releases whose private ``Fetcher._proc_fetch_request(assignment, node_id,
# request)`` was read and tested with this patch.
SUPPORTED_AIOKAFKA = ("0.12.", "0.13.", "0.14.")
LOOPBACK = ("127.", "localhost", "[::1]", "::1")

_pause = FetchPause()
_original: dict[str, Any] = {}
_warned: list[str] = []


def supported() -> bool:
    """The installed aiokafka is one the patch was checked against (else warn once)."""
    method = _original.get("fetch", getattr(Fetcher, "_proc_fetch_request", None))
    ok = (aiokafka.__version__.startswith(SUPPORTED_AIOKAFKA) and method is not None
          and list(inspect.signature(method).parameters)
          == ["self", "assignment", "node_id", "request"])
    if not ok and not _warned:
        _warned.append(aiokafka.__version__)
        log.warning("aiokafka %s is not one the empty-fetch pause was checked against; idle "
                    "consumers on the embedded broker will use more CPU", aiokafka.__version__)
    return ok


def needs_pause(kafka: KafkaSettings, bootstrap: str) -> bool:
    """Whether consumers of ``bootstrap`` need the pause: ``KAFKA__FETCH_PAUSE`` always or
    never, or auto: the broker is on loopback (where the embedded brokers listen)."""
    if kafka.fetch_pause != "auto":
        return kafka.fetch_pause == "always"
    hosts = [h.strip() for h in bootstrap.split(",") if h.strip()]
    return bool(hosts) and all(h.startswith(LOOPBACK) for h in hosts)


async def _fetch_then_pause(self: Fetcher, assignment: Any, node_id: int, request: Any) -> Any:
    got_data = await _original["fetch"](self, assignment, node_id, request)
    pause: FetchPause = getattr(self, "_memstream_pause", _pause)
    now = asyncio.get_running_loop().time()
    if got_data:
        self._memstream_last_data = now
    elif pause.pause_s > 0:
        delay = pause.after_empty(now, getattr(self, "_memstream_last_data", None),
                                  getattr(self, "_memstream_latency", False))
        try:
            await asyncio.sleep(delay)
        except asyncio.CancelledError:
            return got_data  # the consumer is closing: end like the plain fetch would
    return got_data


def pause_empty_fetches(pause_s: float, busy_pause_s: float | None = None,
                        busy_window_s: float = 0.0, background_pause_s: float | None = None,
                        background_busy_pause_s: float | None = None) -> None:
    """Make every aiokafka consumer of this process pause after an empty fetch: when idle,
    ``pause_s`` if marked latency-sensitive, else ``background_pause_s`` (both jittered
    ±50%); within ``busy_window_s`` of its last records ``busy_pause_s``, or
    ``background_busy_pause_s`` if not latency-sensitive. Process-wide and idempotent;
    ``pause_s=0`` restores the plain behaviour."""
    _pause.pause_s = pause_s
    _pause.busy_pause_s = pause_s if busy_pause_s is None else busy_pause_s
    _pause.busy_window_s = busy_window_s
    _pause.background_pause_s = pause_s if background_pause_s is None else background_pause_s
    _pause.background_busy_pause_s = _pause.busy_pause_s if background_busy_pause_s is None \
        else background_busy_pause_s
    if not supported() or Fetcher._proc_fetch_request is _fetch_then_pause:
        return
    _original.setdefault("fetch", Fetcher._proc_fetch_request)
    Fetcher._proc_fetch_request = _fetch_then_pause


def restore_fetches() -> None:
    """Undo ``pause_empty_fetches`` for this process (consumers patched one by one keep it)."""
    if "fetch" in _original and Fetcher._proc_fetch_request is _fetch_then_pause:
        Fetcher._proc_fetch_request = _original["fetch"]


def pause_consumer(consumer: AIOKafkaConsumer, kafka: KafkaSettings, bootstrap: str,
                   latency: bool = True) -> bool:
    """After ``consumer.start()``: the empty-fetch pause for this one consumer, if its broker
    needs it (``needs_pause``). Nothing else in the process changes. True if applied."""
    fetcher = getattr(consumer, "_fetcher", None)
    if fetcher is None:
        raise RuntimeError("pause a consumer after starting it")
    if not needs_pause(kafka, bootstrap) or not supported():
        return False
    _original.setdefault("fetch", Fetcher._proc_fetch_request)
    fetcher._memstream_pause = FetchPause(
        kafka.empty_fetch_pause_s, kafka.busy_fetch_pause_s, kafka.busy_window_s,
        kafka.background_fetch_pause_s, kafka.background_busy_fetch_pause_s)
    fetcher._memstream_latency = latency
    if type(fetcher)._proc_fetch_request is not _fetch_then_pause:
        fetcher._proc_fetch_request = types.MethodType(_fetch_then_pause, fetcher)
    return True


def configure_fetch_pause(kafka: KafkaSettings) -> None:
    """``pause_empty_fetches`` as the settings say."""
    pause_empty_fetches(kafka.empty_fetch_pause_s, kafka.busy_fetch_pause_s, kafka.busy_window_s,
                        kafka.background_fetch_pause_s, kafka.background_busy_fetch_pause_s)


def mark_latency_sensitive(consumer: AIOKafkaConsumer) -> None:
    """After ``consumer.start()``: someone waits on what it reads, so its idle pause is the
    short one."""
    fetcher = getattr(consumer, "_fetcher", None)
    if fetcher is None:
        raise RuntimeError("mark a consumer latency-sensitive after starting it")
    fetcher._memstream_latency = True


# How long leaving the broker may take per producer or consumer: a client whose broker has
# gone must still close.
STOP_S = 10.0
# Where a client's stopping producer or consumer is kept while it outlives ``stop_within``.
_stopping: set[asyncio.Task[Any]] = set()


async def stop_within(client: Any, what: str, seconds: float = STOP_S) -> None:
    """Stop an aiokafka producer or consumer, waiting at most ``seconds``.

    A consumer whose broker has gone can take minutes to stop (its fetch retries the dead
    node and its close swallows a cancel), so the stop goes on in the background past the
    limit rather than hanging whoever is closing."""
    task = asyncio.create_task(client.stop(), name=f"memstream-stop-{what}")
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if done:
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.warning("stopping the %s failed: %s", what, exc)
        return
    log.warning("the %s did not stop within %.0fs (is the broker gone?); leaving it", what,
                seconds)
    _keep(task)


async def cancel_within(task: asyncio.Task[Any] | None, what: str,
                        seconds: float = STOP_S) -> None:
    """Cancel a background loop and wait until it has ended, at most ``seconds``.

    A library that swallows a cancellation (aiokafka and others wrap their own tasks in
    ``suppress(CancelledError)``, which also eats a cancel aimed at the caller) leaves a
    loop running after one ``cancel``: seen as a worker's stop that waited 295 s on its
    provenance indexer. So the cancel is repeated until the loop ends; past the limit it is
    left, with a warning, rather than hanging whoever is stopping. A cancel of the caller
    itself is not swallowed here."""
    if task is None or task.done():
        return
    deadline = asyncio.get_running_loop().time() + seconds
    while not task.done():
        left = deadline - asyncio.get_running_loop().time()
        if left <= 0:
            log.warning("the %s did not end within %.0fs of being cancelled; leaving it", what,
                        seconds)
            _keep(task)
            return
        task.cancel()
        await asyncio.wait({task}, timeout=min(left, 0.5))
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.warning("the %s had failed: %r", what, exc)


def _keep(task: asyncio.Task[Any]) -> None:
    """Hold a background stop until it ends (the loop keeps only weak references)."""
    _stopping.add(task)
    task.add_done_callback(_stopping.discard)


async def start_or_release(client: Any, what: str) -> None:
    """Start an aiokafka producer or consumer. One whose start fails or is cancelled may
    hold connections and tasks: it is stopped in the background, and the error raised."""
    try:
        await client.start()
    except BaseException:
        _keep(asyncio.create_task(stop_within(client, what), name=f"memstream-stop-{what}"))
        raise
