"""``Deps`` on in-memory doubles: stage logic runs without a broker, a graph or a vector server.

The stores are the shipped doubles (``InMemoryGraphStore``, ``InMemoryVectorStore``) that
pass the same contract suite as FalkorDB and Milvus, behind the real ``MemoryStore``; the
model is the ``rules`` stand-in; the embedder is the local e5 model (in-process, not a
service; ``OneByOne`` says why it gets one text at a time), so similarities are those the
pipeline really sees and the rules merge judge and the searcher decide as they do in
production. The clock is a hand-moved one.

    deps = memory_deps(tmp_path)
    out = await add_memories([record(item)], deps)
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from pydantic import BaseModel

from memstream.sinks.graph.memory import InMemoryGraphStore
from memstream.sinks.memory_store import MemoryStore
from memstream.sinks.vector.memory import InMemoryVectorStore
from memstream.streams.embed.local import LocalEmbedder
from memstream.streams.embed.port import Embedder, Vectors
from memstream.streams.llm.port import LLM, Ctx, LLMError, LLMUsage, Resp, Task
from memstream.streams.llm.rules import RulesLLM
from memstream.streams.runtime.stage import Deps, Outgoing, RawRecord, Record
from memstream.topics.events import Origin
from memstream.topics.ids import stable_id
from memstream.topics.models import MemoryItem, MemoryMetadata
from memstream.topics.settings import Settings

E = TypeVar("E", bound=BaseModel)
T0 = datetime(2026, 5, 1, 9, tzinfo=UTC)

_embedder: OneByOne | None = None
_offsets = itertools.count()


class OneByOne:
    """An embedder that hands its inner one text at a time. The local engine embeds a batch
    on an OpenMP team whose threads spin while they wait; on a busy machine (the rest of the
    suite running beside) a five-text batch took seconds where five single texts take
    milliseconds. The vectors are the same: the model reads each text on its own either way."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.name = inner.name  # "local": the scheduler picks its thresholds by it

    @property
    def dim(self) -> int:
        return self.inner.dim

    async def embed_passages(self, texts: Sequence[str]) -> Vectors:
        return await self._each(texts, self.inner.embed_passages)

    async def embed_queries(self, texts: Sequence[str]) -> Vectors:
        return await self._each(texts, self.inner.embed_queries)

    async def _each(self, texts: Sequence[str],
                    embed: Callable[[Sequence[str]], Awaitable[Vectors]]) -> Vectors:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.vstack([await embed([text]) for text in texts])

    async def close(self) -> None:
        await self.inner.close()


def local_embedder() -> OneByOne:
    """The local e5 model (in-process, not a service), loaded once for the whole session."""
    global _embedder
    if _embedder is None:
        _embedder = OneByOne(LocalEmbedder())
    return _embedder


@dataclass
class ManualClock:
    """A clock that moves only when told to (``Deps.clock``)."""

    now: datetime = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> datetime:
        self.now += timedelta(**delta)
        return self.now


@dataclass
class ScriptedLLM:
    """The ``rules`` stand-in, except for tasks given an answer or an error here: a model
    that says something specific, or fails, for one task."""

    answers: Mapping[str, BaseModel | Exception | Callable[[Any], BaseModel]]
    inner: LLM = field(default_factory=RulesLLM)
    name: str = "scripted"
    usage: LLMUsage = field(default_factory=LLMUsage)
    calls: list[str] = field(default_factory=list)

    async def run(self, task: Task[Ctx, Resp], ctx: Ctx) -> Resp:
        self.calls.append(task.name)
        if task.name not in self.answers:
            return await self.inner.run(task, ctx)
        answer = self.answers[task.name]
        if isinstance(answer, Exception):
            raise answer
        if callable(answer) and not isinstance(answer, BaseModel):
            answer = answer(ctx)
        if not isinstance(answer, task.response):
            raise LLMError(task.name, f"scripted answer is not a {task.response.__name__}")
        return answer

    async def close(self) -> None:
        return None


def settings_for(data_dir: Path, **sections: Any) -> Settings:
    """Settings with their data under ``data_dir``; ``sections`` override nested fields,
    e.g. ``memory={"long_term_memory_capacity": 3}``."""
    return Settings(data_dir=data_dir, **sections)


def memory_deps(
    data_dir: Path,
    *,
    llm: LLM | None = None,
    embedder: Embedder | None = None,
    clock: ManualClock | None = None,
    **sections: Any,
) -> Deps:
    """A stage's dependencies on fresh in-memory stores (one graph, one vector collection)."""
    emb = embedder or local_embedder()

    async def no_wait(_seconds: float) -> None:
        return None

    store = MemoryStore(InMemoryGraphStore(), InMemoryVectorStore(dim=emb.dim), sleep=no_wait)
    return Deps(settings=settings_for(data_dir, **sections), llm=llm or RulesLLM(),
                embedder=emb, store=store, clock=clock or ManualClock())


async def remember(deps: Deps, cube_id: str, *texts: str, at: datetime = T0,
                   **metadata: Any) -> list[MemoryItem]:
    """Write memories straight into the store (node and passage vector, as the add stage
    writes them, without its merging): each a second newer than the one before, so the last
    is the newest. ``metadata`` applies to all, e.g. ``memory_type="UserMemory"``."""
    fields: dict[str, Any] = {"memory_type": "LongTermMemory", **metadata}
    nodes = [MemoryItem(id=f"{cube_id}-{i}-{stable_id(cube_id, text)[:8]}", memory=text,
                        metadata=MemoryMetadata(user_id=cube_id, cube_id=cube_id,
                                                created_at=at + timedelta(seconds=i),
                                                updated_at=at + timedelta(seconds=i),
                                                **fields))
             for i, text in enumerate(texts)]
    vectors = await deps.embedder.embed_passages([n.memory for n in nodes])
    await deps.store.write([(n, v.tolist()) for n, v in zip(nodes, vectors, strict=True)])
    return nodes


def record(event: E, topic: str = "test.input", partition: int = 0,
           offset: int | None = None) -> Record[E]:
    """An event as a logic function receives it: decoded, with its position in a log."""
    at = next(_offsets) if offset is None else offset
    raw = RawRecord(topic=topic, partition=partition, offset=at,
                    key=getattr(event, "cube_id", "").encode() or None,
                    value=event.model_dump_json().encode())
    return Record(event, Origin(topic=topic, partition=partition, offset=at), raw)


def records(events: Iterable[E]) -> list[Record[E]]:
    return [record(e) for e in events]


async def sent(out: Sequence[Outgoing]) -> list[Outgoing]:
    """``out`` as published: each output's ``then`` action (e.g. an eviction, done only once
    it is announced) run in order once all are sent, as the stage runtime does."""
    for one in out:
        action = getattr(one, "then", None)
        if action is not None:
            await action()
    return list(out)


def events_of(out: Iterable[Outgoing], kind: type[E]) -> list[E]:
    """The published events of one type, in order."""
    return [o.event for o in out if isinstance(o.event, kind)]


def topics_of(out: Iterable[Outgoing]) -> list[str]:
    return [o.spec.suffix for o in out]
