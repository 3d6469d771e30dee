"""A worker's Prometheus metrics, served on its own HTTP endpoint (``/metrics``).

Each worker has its own registry (several workers may share a process in tests). Stage
counters (records, dead letters, retries) are read from the stages' ``StageStats`` when
scraped; records/s is averaged over ``metrics.rate_window_s`` from periodic samples; the
consumer lag per topic-partition is sampled from the broker every ``sample_interval_s``, and
each sample is checked for stalled partitions (``streams.runtime.stalls``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from memstream.kafka.compat import cancel_within
from memstream.sinks.lru import LRU
from memstream.topics.settings import Settings

if TYPE_CHECKING:
    from memstream.kafka.admin import Positions
    from memstream.streams.runtime.stage import StageStats
    from memstream.streams.runtime.stalls import StallWatch

log = logging.getLogger("memstream.metrics")

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                   10.0, 30.0, 60.0)
PositionProbe = Callable[[], Awaitable["Positions"]]  # the group's offsets, per partition


class _StageCollector(Collector):
    def __init__(self, metrics: WorkerMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Any]:
        m = self.metrics
        records = CounterMetricFamily("memstream_stage_records", "Records handled per stage",
                                      labels=["stage"])
        dead = CounterMetricFamily("memstream_dead_letters", "Events dead-lettered per stage",
                                   labels=["stage"])
        retries = CounterMetricFamily("memstream_stage_retries", "Retried attempts per stage",
                                      labels=["stage"])
        rate = GaugeMetricFamily("memstream_stage_records_per_second",
                                 "Records handled per second, averaged over the rate window",
                                 labels=["stage"])
        now = time.monotonic()
        for name, stats in sorted(m.stats.items()):
            records.add_metric([name], stats.processed)
            dead.add_metric([name], stats.dead_lettered)
            retries.add_metric([name], stats.retries)
            rate.add_metric([name], m.rate(name, stats.processed, now))
        lag = GaugeMetricFamily("memstream_consumer_lag",
                                "Records the workers have not yet processed, per input "
                                "topic-partition (all workers of the group)",
                                labels=["topic", "partition"])
        for (topic, partition), value in sorted(m.lag.items()):
            lag.add_metric([topic, str(partition)], value)
        stalls = GaugeMetricFamily("memstream_stall_seconds",
                                   "Partitions of this worker stalled now: seconds none of the "
                                   "records waiting on it was handled (worker.stall_after_s)",
                                   labels=["stage", "topic", "partition"])
        for stall in m.stalls.stalled if m.stalls is not None else ():
            stalls.add_metric([stall.stage, stall.topic, str(stall.partition)], stall.idle_s)
        yield from (records, dead, retries, rate, lag, stalls)


class WorkerMetrics:
    """The metrics of one worker, and the samplers and endpoint that serve them."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.stats: dict[str, StageStats] = {}
        self.lag: dict[tuple[str, int], int] = {}
        self.lag_at: float | None = None
        self.stalls: StallWatch | None = None  # checks each lag sample for stalled partitions
        self._samples: dict[str, deque[tuple[float, int]]] = {}
        self.stage_seconds = Histogram(
            "memstream_stage_handling_seconds", "Time to handle one cube's batch (or one "
            "request), per stage", ["stage"], buckets=LATENCY_BUCKETS, registry=r)
        self.llm_calls = Counter("memstream_llm_calls", "LLM tasks run, per stage and cube",
                                 ["stage", "cube", "task", "outcome"], registry=r)
        self.llm_tokens = Counter("memstream_llm_tokens", "LLM tokens used, per stage and cube",
                                  ["stage", "cube", "kind"], registry=r)
        self.llm_seconds = Histogram("memstream_llm_call_seconds",
                                     "Duration of an LLM task (with its retries)",
                                     ["stage", "cube"], buckets=LATENCY_BUCKETS, registry=r)
        self.search_seconds = Histogram("memstream_search_seconds",
                                        "Search latency by the mode actually used", ["mode"],
                                        buckets=LATENCY_BUCKETS, registry=r)
        self.search_degraded = Counter("memstream_search_degraded",
                                       "Fine searches run as fast because extraction lags",
                                       registry=r)
        self.over_budget = Counter("memstream_llm_budget_exceeded",
                                   "LLM tasks not sent because the cube spent its budget",
                                   ["cube", "stage", "action"], registry=r)
        self.turns = Counter("memstream_turns_ingested", "Conversation turns extracted (the "
                             "denominator of LLM calls and tokens per turn)", registry=r)
        self.spent = Gauge("memstream_llm_budget_spent_tokens",
                           "Tokens a cube with a budget spent in the current period", ["cube"],
                           registry=r)
        r.register(_StageCollector(self))
        self._labelled: set[str] = set()  # cubes with a label of their own (see _cube)
        self._spenders: LRU[str, bool] = LRU(settings.metrics.cube_labels_max,
                                            on_evict=lambda cube, _: self.spent.remove(cube))
        self._server: Any = None
        self._sampler: asyncio.Task[None] | None = None
        self.url: str | None = None

    # -- recording --------------------------------------------------------------------------

    def bind(self, stats: dict[str, StageStats]) -> None:
        """Measure these stages: their counters when scraped, their handling time as it runs."""
        self.stats = stats
        for name, s in stats.items():
            s.latency = self.stage_seconds.labels(name)

    def _cube(self, cube_id: str) -> str:
        """The cube's label: its id for the first ``metrics.cube_labels_max`` cubes this
        worker meters, "" for the others (and for every cube without ``cube_labels``).

        A cap, not a least-recently-used bound: a counter's series that left and came back
        would read as a reset, and one folded into "" as a jump of its whole count; capped,
        every series only grows and their sum stays the worker's total."""
        if not self.settings.metrics.cube_labels:
            return ""
        if cube_id in self._labelled:
            return cube_id
        if len(self._labelled) < self.settings.metrics.cube_labels_max:
            self._labelled.add(cube_id)
            return cube_id
        return ""

    def llm_call(self, stage: str, cube_id: str, task: str, outcome: str, prompt: int,
                 completion: int, seconds: float) -> None:
        cube = self._cube(cube_id)
        self.llm_calls.labels(stage, cube, task, outcome).inc()
        if prompt:
            self.llm_tokens.labels(stage, cube, "prompt").inc(prompt)
        if completion:
            self.llm_tokens.labels(stage, cube, "completion").inc(completion)
        self.llm_seconds.labels(stage, cube).observe(seconds)

    def budget_spent(self, cube_id: str, tokens: int) -> None:
        """The cube's spend now, for the ``metrics.cube_labels_max`` cubes that spent last
        (a gauge that leaves only stops being reported; it is set again at the next call)."""
        self._spenders.put(cube_id, True)
        self.spent.labels(cube_id).set(tokens)

    def turns_ingested(self, turns: int) -> None:
        self.turns.inc(turns)

    def budget_exceeded(self, cube_id: str, stage: str, action: str) -> None:
        self.over_budget.labels(self._cube(cube_id), stage, action).inc()

    def search(self, mode: str, seconds: float) -> None:
        self.search_seconds.labels(mode).observe(seconds)

    def rate(self, stage: str, processed: int, now: float) -> float:
        samples = self._samples.get(stage)
        if not samples:
            return 0.0
        then, count = samples[0]
        return (processed - count) / (now - then) if now - then > 0 else 0.0

    def extraction_lag(self) -> int | None:
        """Records of ``conversations`` not yet extracted (last sample), None before one."""
        if self.lag_at is None:
            return None
        name = self.settings.topic("conversations")
        return sum(v for (topic, _), v in self.lag.items() if topic == name)

    # -- running ----------------------------------------------------------------------------

    def sample(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        window = self.settings.metrics.rate_window_s
        for name, stats in self.stats.items():
            samples = self._samples.setdefault(name, deque())
            samples.append((now, stats.processed))
            while len(samples) > 1 and now - samples[1][0] >= window:
                samples.popleft()

    async def sample_lag(self, probe: PositionProbe) -> None:
        positions = await probe()
        self.lag = {(topic, p): pos.lag for topic, parts in positions.items()
                    for p, pos in parts.items()}
        self.lag_at = time.monotonic()
        if self.stalls is not None:
            self.stalls.observe(positions, self.lag_at)

    async def run_samplers(self, probe: PositionProbe) -> None:
        interval = self.settings.metrics.sample_interval_s
        while True:
            self.sample()
            try:
                await self.sample_lag(probe)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - a lag probe failing must not stop sampling
                log.debug("lag probe failed: %s", exc)
            if (task := asyncio.current_task()) is not None and task.cancelling():
                raise asyncio.CancelledError  # the probe's clients swallowed the stop's cancel
            await asyncio.sleep(interval)

    def start(self, probe: PositionProbe, stalls: StallWatch | None = None) -> str | None:
        """Start the samplers (each lag sample checked by ``stalls``) and, if enabled, the
        HTTP endpoint; returns its URL."""
        self.stalls = stalls
        self._sampler = asyncio.create_task(self.run_samplers(probe), name="metrics-sampler")
        m = self.settings.metrics
        if not m.enabled:
            return None
        server, _thread = start_http_server(m.port, m.host, registry=self.registry)
        self._server = server
        host = "127.0.0.1" if m.host in ("0.0.0.0", "") else m.host  # noqa: S104 - a comparison
        self.url = f"http://{host}:{server.server_port}/metrics"
        log.info("metrics at %s", self.url)
        return self.url

    async def stop(self) -> None:
        sampler, self._sampler = self._sampler, None
        # the lag probe runs aiokafka clients, whose close can swallow the cancel aimed at
        # the sampler: a bare cancel-and-gather hung a worker's stop for 295 s
        await cancel_within(sampler, "metrics sampler")
        if self._server is not None:
            server, self._server = self._server, None
            await asyncio.to_thread(server.shutdown)
            server.server_close()
