"""A worker: builds the stage dependencies from settings and runs the faust app.

It runs inside any asyncio loop (the CLI's, a test's, the demo's), so a test can
start a real worker against a real broker and stores and stop it cleanly.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from types import TracebackType

import faust
from threadpoolctl import threadpool_limits

from sinks.graph_factory import create_graph_store
from sinks.memory_store import MemoryStore
from sinks.vector_factory import create_vector_store
from streams.app import BoundTopics, create_app, register_stages
from streams.embed.factory import create_embedder
from streams.embed.port import Embedder
from streams.llm.factory import create_llm
from streams.llm.port import LLM
from streams.reaper import reap_dead_members
from streams.runtime import Clock, Deps, StageStats
from topics.admin import ensure_topics
from topics.kafka_compat import configure_fetch_pause
from topics.members import remove_stale_members
from topics.models import utcnow
from topics.progress import Progress
from topics.registry import WORKER_INPUTS, consumer_group
from topics.settings import Settings

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
    deps: Deps | None = field(default=None, init=False)
    app: faust.App | None = field(default=None, init=False)
    bound: BoundTopics | None = field(default=None, init=False)
    stats: dict[str, StageStats] = field(default_factory=dict, init=False)
    progress: Progress | None = field(default=None, init=False)

    async def open_deps(self) -> Deps:
        """Connect the stores and providers (without consuming anything)."""
        s = self.settings
        llm = self.llm or create_llm(s.llm)
        embedder = self.embedder or create_embedder(s.embedder, s.limits.embed_chars)
        graph = create_graph_store(s, self.graph_uri)
        await graph.ensure_schema()
        vectors = create_vector_store(s, embedder.dim)
        await vectors.ensure_collection()
        self.deps = Deps(settings=s, llm=llm, embedder=embedder, graph=graph, vectors=vectors,
                         store=MemoryStore(graph, vectors), clock=self.clock)
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
        configure_fetch_pause(s.kafka)
        await ensure_topics(s, self.bootstrap)
        # A worker killed outright stays in its groups on the embedded broker: drop it first.
        await remove_stale_members(self.bootstrap, {consumer_group(s, t) for t in WORKER_INPUTS})
        deps = await self.open_deps()
        llm, embedder = deps.llm, deps.embedder
        self.app, self.bound = create_app(s, self.bootstrap)
        self.progress = Progress(s, self.bootstrap)
        self.stats = register_stages(self.bound, deps, self.progress)
        groups = {consumer_group(s, t) for t in WORKER_INPUTS}

        async def reap() -> None:  # the broker may never drop a killed worker (streams.reaper)
            await reap_dead_members(self.bootstrap, groups, s.kafka.session_timeout_s)

        self.app.task(reap)
        await self.app.start()
        limit_blas_threads(s.worker.blas_threads)  # once the stores have loaded theirs
        log.info("worker %s started (broker %s, graph %s, vectors %s, llm %s, embedder %s)",
                 s.app_id, self.bootstrap, self.graph_uri, s.milvus_uri, llm.name, embedder.name)

    async def stop(self) -> None:
        if self.app is not None:
            await self.app.stop()
            self.app = None
        if self.progress is not None:
            await self.progress.close()
            self.progress = None
        if self.deps is not None:
            d, self.deps = self.deps, None
            for closer in (d.graph.close, d.vectors.close, d.llm.close, d.embedder.close):
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
