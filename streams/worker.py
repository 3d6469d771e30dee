"""A worker: builds the stage dependencies from settings and runs the faust app.

It runs inside any asyncio loop (the CLI's, a test's, the demo's), so a test can
start a real worker against a real broker and stores and stop it cleanly.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import faust
from threadpoolctl import threadpool_limits

from memstream.archive.archiver import archive_forever
from memstream.archive.archiver import enabled as archive_enabled
from memstream.history.log_index import index_group
from memstream.kafka import tracing
from memstream.kafka.admin import ensure_topics, worker_positions
from memstream.kafka.compat import configure_fetch_pause, needs_pause
from memstream.kafka.log_ends import LogWatch
from memstream.kafka.members import remove_stale_members
from memstream.kafka.progress import Progress
from memstream.kafka.rejoin import patch_rejoin
from memstream.kafka.trim import trim_forever
from memstream.security.keys import activate as activate_keys
from memstream.security.keys import release as release_keys
from memstream.security.signing import check_worker_signing
from memstream.sinks.graph.factory import create_graph_store
from memstream.sinks.memory_store import MemoryStore
from memstream.sinks.ports import GraphStore
from memstream.sinks.vector.factory import create_vector_store
from memstream.streams.app import create_app
from memstream.streams.commands.agent import register as register_commands
from memstream.streams.commands.logic import run_command
from memstream.streams.core.working_memory import apply_replacements
from memstream.streams.embed.factory import create_embedder, with_cache
from memstream.streams.embed.port import Embedder
from memstream.streams.extraction.agent import register as register_extraction
from memstream.streams.extraction.logic import extract_chunk
from memstream.streams.lifecycle.agent import register as register_lifecycle
from memstream.streams.llm.factory import create_llm
from memstream.streams.llm.port import LLM
from memstream.streams.memory.agent import register as register_memory
from memstream.streams.memory.logic import add_memories
from memstream.streams.ops.budget import MeteredLLM
from memstream.streams.ops.metrics import WorkerMetrics
from memstream.streams.provenance.indexer import ProvenanceIndexer
from memstream.streams.reorganize.agent import register as register_reorganize
from memstream.streams.reorganize.inline import InlineOptimizer
from memstream.streams.replay.commands import ReplayCommands
from memstream.streams.replay.stages import ReplayStages
from memstream.streams.runtime.batches import BoundTopics
from memstream.streams.runtime.heap import freeze_startup_objects, spread_full_passes
from memstream.streams.runtime.reaper import reap_dead_members
from memstream.streams.runtime.stage import Clock, Deps, StageStats
from memstream.streams.runtime.views import ViewMap
from memstream.streams.scheduler.agent import register as register_scheduler
from memstream.streams.search.agent import register as register_search
from memstream.streams.search.warming import warm_recent_cubes
from memstream.topics.events import WriteToken
from memstream.topics.models import utcnow
from memstream.topics.registry import WORKER_INPUTS, consumer_group
from memstream.topics.settings import Settings

log = logging.getLogger("memstream.worker")


def limit_blas_threads(threads: int | None) -> None:
    """Cap the BLAS pools of this process (``worker.blas_threads``; None: leave them).

    The worker's matrices are small (one cube's vectors against a query), so a second
    BLAS thread buys nothing, and OpenBLAS's idle threads spin after each call: measured
    at ~20 ms of CPU per search on two cores, slowing the embedder sharing them. The
    pools loaded already (numpy's, scipy's, Milvus Lite's faiss) are capped now; an
    OpenBLAS loaded later reads the environment variable.
    """
    if threads is not None:
        os.environ["OPENBLAS_NUM_THREADS"] = str(threads)
        threadpool_limits(limits=threads, user_api="blas")


@dataclass
class Worker:
    """One memstream worker process's worth of stages, started and stopped as a unit."""

    settings: Settings
    bootstrap: str
    graph_uri: str
    clock: Clock = utcnow
    llm: LLM | None = None
    embedder: Embedder | None = None
    # Awaited before the graph is used: the embedded FalkorDB may still be loading a large
    # graph, and the vector store loads meanwhile (``EmbeddedStack.graph_ready``; returns
    # the graph's URI).
    graph_ready: Callable[[], Awaitable[str]] | None = None
    deps: Deps | None = field(default=None, init=False)
    app: faust.App | None = field(default=None, init=False)
    bound: BoundTopics | None = field(default=None, init=False)
    stats: dict[str, StageStats] = field(default_factory=dict, init=False)
    progress: Progress | None = field(default=None, init=False)
    indexer: ProvenanceIndexer | None = field(default=None, init=False)
    _keys: Path | None = field(default=None, init=False)
    metrics: WorkerMetrics | None = field(default=None, init=False)
    metrics_url: str | None = field(default=None, init=False)  # its /metrics endpoint

    async def open_deps(self) -> Deps:
        """Connect the stores and providers (without consuming anything)."""
        s = self.settings
        self.metrics = WorkerMetrics(s)
        embedder = self.embedder or with_cache(
            create_embedder(s.embedder, s.limits.embed_chars), s.embedder,
            s.data_dir / "embeddings", s.limits.embed_chars)
        vectors = create_vector_store(s, embedder.dim)

        async def open_graph() -> GraphStore:
            if self.graph_ready is not None:
                self.graph_uri = await self.graph_ready()
            graph = create_graph_store(s, self.graph_uri)
            try:
                await graph.ensure_schema()
            except BaseException:
                await graph.close()
                raise
            return graph

        # Both stores load their data at start (a large graph, a large collection): at once.
        graph, loaded = await asyncio.gather(open_graph(), vectors.ensure_collection(),
                                             return_exceptions=True)
        if isinstance(graph, BaseException) or isinstance(loaded, BaseException):
            if not isinstance(graph, BaseException):
                await graph.close()
            await vectors.close()
            raise graph if isinstance(graph, BaseException) else loaded  # type: ignore[misc]
        llm = MeteredLLM(self.llm or create_llm(s.llm), s.governance, self.clock, self.metrics,
                         graph)
        self.deps = Deps(settings=s, llm=llm, embedder=embedder,
                         store=MemoryStore(graph, vectors), clock=self.clock,
                         bootstrap=self.bootstrap, ops=self.metrics,
                         command_handlers=dict.fromkeys(("replay", "promote", "drop_views"),
                                                        ReplayCommands(replay_stages()).run))
        return self.deps

    async def start(self) -> None:
        """Start every stage; on failure or cancellation, close what was opened and re-raise."""
        try:
            await self._start()
        except BaseException:
            await self.stop()
            raise

    async def _start(self) -> None:
        s = self.settings
        check_worker_signing(s.security)  # a worker refusing unsigned events signs its own
        tracing.configure(s.tracing, "memstream-worker")
        if needs_pause(s.kafka, self.bootstrap):  # the embedded broker never long-polls
            configure_fetch_pause(s.kafka)
        patch_rejoin()  # a rebalance's survivors rejoin as themselves (kafka.rejoin)
        if (key_dir := s.erasure_key_dir) is not None:
            activate_keys(key_dir)  # seal and open event values with per-cube keys
            self._keys = key_dir
        await ensure_topics(s, self.bootstrap)
        # A worker killed outright stays in its groups on the embedded broker: drop it first.
        await remove_stale_members(self.bootstrap, {consumer_group(s, t) for t in WORKER_INPUTS}
                                   | {index_group(s)})
        deps = await self.open_deps()
        deps.views = ViewMap(s, self.bootstrap)
        await deps.views.start()  # every promoted cube known before the first request
        llm, embedder = deps.llm, deps.embedder
        self.app, self.bound = create_app(s, self.bootstrap)
        self.progress = Progress(s, self.bootstrap)
        self.stats = register_stages(self.bound, deps, self.progress)
        groups = {consumer_group(s, t) for t in WORKER_INPUTS} | {index_group(s)}

        async def reap() -> None:  # the broker may never drop a killed worker (streams.reaper)
            await reap_dead_members(self.bootstrap, groups, s.kafka.session_timeout_s)

        self.app.task(reap)
        if s.worker.trim_interval_s > 0:

            async def trim() -> None:  # requests and replies off the broker's disk
                await trim_forever(s, self.bootstrap, s.worker.trim_interval_s)

            self.app.task(trim)
        if archive_enabled(s, self.bootstrap):

            async def archive() -> None:  # the log's older records off the broker's file
                await archive_forever(s, self.bootstrap)

            self.app.task(archive)
        if s.kafka.log_watch_s > 0:
            from memstream.local.broker import broker_data_dir, is_embedded
            from memstream.local.broker_snapshot import preserve

            watch = LogWatch(s, self.bootstrap)
            embedded = is_embedded(s, self.bootstrap)
            broker_dir = broker_data_dir(s)

            def keep_last_good() -> None:  # the embedded broker's data file, while it is whole
                preserve(broker_dir)

            async def watch_log_ends() -> None:  # a broker that lost records is noticed
                try:
                    await watch.record_forever(s.data_dir, s.kafka.log_watch_s,
                                               keep_last_good if embedded else None)
                finally:
                    await watch.close()

            self.app.task(watch_log_ends)
        if s.search.warm_cubes > 0:

            async def warm() -> None:  # the first search of a recent cube is not a cold one
                await warm_recent_cubes(deps, s.search.warm_cubes)

            self.app.task(warm)
        await self.app.start()
        self.indexer = ProvenanceIndexer(s, self.bootstrap, deps.store.graph)
        await self.indexer.start()  # where each cube's records sit in the log (provenance)
        if self.metrics is not None:
            self.metrics.bind(self.stats)
            self.metrics_url = self.metrics.start(lambda: worker_positions(s, self.bootstrap),
                                                  self.bound.stalls)
        limit_blas_threads(s.worker.blas_threads)  # once the stores have loaded theirs
        freeze_startup_objects()  # full collections walk only what comes after start-up
        spread_full_passes()  # ... and come a tenth as often
        log.info("worker %s started (broker %s, graph %s, vectors %s, llm %s, embedder %s)",
                 s.app_id, self.bootstrap, self.graph_uri, s.milvus_uri, llm.name, embedder.name)

    async def stop(self) -> None:
        indexer, self.indexer = self.indexer, None
        if indexer is not None:
            await indexer.stop()
        tracing.flush()
        if self.metrics is not None:
            await self.metrics.stop()
        if self.app is not None:
            await self.app.stop()
            self.app = None
        if self._keys is not None:
            release_keys(self._keys)
            self._keys = None
        if self.progress is not None:
            await self.progress.close()
            self.progress = None
        if self.deps is not None:
            d, self.deps = self.deps, None
            closers = [d.store.graph.close, d.store.vectors.close, d.llm.close, d.embedder.close]
            if d.views is not None:
                closers.insert(0, d.views.stop)
            for closer in closers:
                try:
                    await closer()
                except Exception:  # noqa: BLE001 - keep closing the rest
                    log.exception("error while closing %s", closer)

    async def __aenter__(self) -> Worker:
        await self.start()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()


def replay_stages() -> ReplayStages:
    """The live stages' logic, as a replay drives it (the one place that names them all)."""
    return ReplayStages(add_memories=add_memories, extract_chunk=extract_chunk,
                        run_command=run_command, apply_replacements=apply_replacements,
                        optimizer=InlineOptimizer)


def register_stages(bound: BoundTopics, deps: Deps, progress: Progress) -> dict[str, StageStats]:
    """Register every stage of the pipeline on the app; returns per-stage counters.

    The one place that knows every stage: stages import only ``streams.core``, the runtime
    and the prompts, never each other or this module."""
    stats: dict[str, StageStats] = {}
    stats["extraction"] = register_extraction(bound, deps)
    stats["memory.add"] = register_memory(bound, deps)
    stats["commands"] = register_commands(bound, deps)

    async def wait(token: WriteToken, timeout: float) -> None:
        await progress.wait_applied(token, timeout=timeout)

    stats["search"] = register_search(bound, deps, wait)
    bound.services["ingestion"] = (stats["extraction"], stats["memory.add"])  # optimizer yields
    if deps.settings.reorganize.enabled:
        stats["reorganize"], bound.services["reorganize"] = register_reorganize(
            bound, deps, progress)
    if deps.settings.scheduler.enabled:
        stats.update(register_scheduler(bound, deps))
    if deps.settings.lifecycle.enabled:
        bound.services["lifecycle"] = register_lifecycle(bound, deps)
    return stats
