"""A whole pipeline for one test: real broker and FalkorDB (shared per session), fresh
topics, graph, Milvus Lite file and consumer group per test, and a worker in-process."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from memstream.client.client import MemoryClient
from memstream.local.broker import NoidaBroker
from memstream.local.falkordb import FalkorDBServer
from memstream.streams.runtime.stage import Clock, Deps
from memstream.streams.worker import Worker
from memstream.topics.models import MemoryItem, utcnow
from memstream.topics.settings import Settings


@dataclass
class Pipeline:
    settings: Settings
    bootstrap: str
    worker: Worker
    client: MemoryClient
    llm_server: Any = None

    @property
    def deps(self) -> Deps:
        assert self.worker.deps is not None
        return self.worker.deps


def pipeline_settings(tmp: Path, bootstrap: str, graph_uri: str, **overrides: Any) -> Settings:
    """Settings isolating one test: its own topic prefix, group, graph and vector file."""
    tag = uuid.uuid4().hex[:10]
    base: dict[str, Any] = {
        "data_dir": tmp,
        "app_id": f"test-{tag}",
        "kafka": {"bootstrap_servers": bootstrap, "topic_prefix": f"t{tag}.", "partitions": 2,
                  "session_timeout_s": 6, "rebalance_timeout_s": 6},
        "graph": {"uri": graph_uri, "database": f"g{tag}"},
        "vector": {"uri": str(tmp / "milvus.db"), "collection": f"c{tag}"},
        "worker": {"batch_within_s": 0.05, "retry_backoff_s": 0.01, "commit_interval_s": 0.2},
    }
    for key, value in overrides.items():
        base[key] = {**base.get(key, {}), **value} if isinstance(value, dict) else value
    return Settings(**base)


@pytest_asyncio.fixture(scope="session")
async def falkordb_uri(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    server = FalkorDBServer(tmp_path_factory.mktemp("falkordb"))
    uri = await server.start()
    yield uri
    await server.stop()


async def run_pipeline(settings: Settings, llm_server: Any = None,
                       clock: Clock | None = None) -> AsyncIterator[Pipeline]:
    """``clock``: the worker's clock (stage event times, usage records, lifecycle sweeps)."""
    bootstrap = settings.kafka.bootstrap_servers
    assert bootstrap is not None and settings.graph.uri is not None
    worker = Worker(settings, bootstrap, settings.graph.uri, clock=clock or utcnow)
    await worker.start()
    try:
        async with MemoryClient(settings, bootstrap) as client:
            yield Pipeline(settings, bootstrap, worker, client, llm_server)
    finally:
        await worker.stop()


@pytest_asyncio.fixture
async def pipeline(tmp_path: Path, kafka_broker: str, falkordb_uri: str) -> AsyncIterator[Pipeline]:
    async for p in run_pipeline(pipeline_settings(tmp_path, kafka_broker, falkordb_uri)):
        yield p


@pytest_asyncio.fixture
async def live(tmp_path: Path, kafka_broker: str, falkordb_uri: str) -> AsyncIterator[Pipeline]:
    """The pipeline with structure optimization out of the way (it runs on a timer): what a
    replay must rebuild is then only what the stages did for each record."""
    settings = pipeline_settings(tmp_path, kafka_broker, falkordb_uri,
                                 reorganize={"optimize_interval_s": 3600})
    async for p in run_pipeline(settings):
        yield p


@pytest_asyncio.fixture
async def pipeline_with_llm(
    tmp_path: Path, kafka_broker: str, falkordb_uri: str, scripted_openai: Any
) -> AsyncIterator[Pipeline]:
    """The pipeline with the ``openai`` LLM provider pointed at the scripted server."""
    settings = pipeline_settings(
        tmp_path, kafka_broker, falkordb_uri,
        llm={"base_url": scripted_openai.base_url, "api_key": "test-key", "max_retries": 1,
             "backoff_s": 0.01, "timeout_s": 5},
        worker={"stage_retries": 1},
    )
    async for p in run_pipeline(settings, scripted_openai):
        yield p


async def say_apart(pipeline: Pipeline, cube: str, *texts: str, start: datetime,
              days: int = 1) -> None:
    """Each text as its own chat chunk from the user, ``days`` apart from ``start``, then wait
    for all."""
    tokens = [await pipeline.client.add_messages(cube, [{
        "id": f"m{i}", "role": "user", "content": text,
        "timestamp": start + timedelta(days=days * i)}], session_id=f"s{i}")
        for i, text in enumerate(texts)]
    for token in tokens:
        await pipeline.client.wait_applied(token, timeout=60)


def holding(nodes: list[MemoryItem], words: str) -> MemoryItem:
    """The one node whose text holds ``words``."""
    (node,) = [n for n in nodes if words in n.memory]
    return node


async def facts_by_status(pipeline: Pipeline, cube: str) -> dict[str, list[MemoryItem]]:
    """The cube's extracted statements by status: no episodes, and none of the summaries or
    reasonings the optimizer derives from them."""
    out: dict[str, list[MemoryItem]] = {}
    for memory_type in ("LongTermMemory", "UserMemory"):
        for node in await pipeline.deps.store.graph.all_of_type(cube, memory_type, status=None):
            if node.metadata.hierarchy_level == "fact" and node.metadata.type != "reasoning":
                out.setdefault(node.metadata.status, []).append(node)
    return out


async def sealed_local_pipeline(tmp_path: Path) -> AsyncIterator[Pipeline]:
    """A pipeline on its own broker and FalkorDB under ``tmp_path/data``, erasure on and the
    optimizer's timer out of the way: what the erasure tests scan, file by file."""
    data = tmp_path / "data"
    async with NoidaBroker(data / "broker") as bootstrap, \
            FalkorDBServer(data / "falkordb") as falkordb:
        settings = pipeline_settings(data, bootstrap, falkordb.uri, erasure={"enabled": True},
                                     reorganize={"optimize_interval_s": 3600})
        async for p in run_pipeline(settings):
            yield p
