"""Replay: rebuild a cube's views — graph, vectors, working memory — from the log.

The retained topics are the source of truth: ``memory.items`` (what extraction produced
and what was added directly), ``memory.commands`` (updates, deletes, working-memory
replacements) and ``working-memory`` (the scheduler's replacements). A replay drops the
cube's views and runs the same stage logic the live pipeline runs over the cube's records,
in the order they were written, with the optimizer's ``add``/``remove``/``merge`` work done
in line. Ids are deterministic, so the stores end as the live run left them and a second
replay adds nothing. Items are applied in batches (one embedding call per batch), which is
why a replay is faster than the live pipeline.

A shadow replay (``shadow``) re-extracts the cube's ``conversations`` with another model
into a second cube, publishes what it extracted on ``memory.items`` under that cube (so
the shadow is itself replayable) and applies it; ``promote`` then switches readers over.

Progress is announced on ``memory.updates`` (action ``replayed``, reason ``N/M records``)
and checkpointed in ``<data_dir>/replay/``: a worker stopped mid-replay gets the command
again (it is not committed until the replay is done) and resumes where it stopped.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer

from memstream.kafka.headers import headers_for
from memstream.security.signing import Signer
from memstream.streams.llm.factory import create_llm
from memstream.streams.replay.log import LogRecord, end_offsets, read_cube
from memstream.streams.replay.stages import InlineOptimizer, ReplayStages
from memstream.streams.runtime.stage import Deps, Outgoing, PermanentError, Record
from memstream.topics.events import (
    BackupCube,
    ConversationChunk,
    DeleteCube,
    DropViews,
    DumpCube,
    ExtractedMemory,
    LoadCube,
    MemoryUpdate,
    PromoteCube,
    ReorganizeEvent,
    ReplayCube,
)
from memstream.topics.ids import derived_event_id
from memstream.topics.registry import (
    CONVERSATIONS,
    MEMORY_COMMANDS,
    MEMORY_ITEMS,
    MEMORY_UPDATES,
    WORKING_MEMORY,
    TopicSpec,
)

log = logging.getLogger("memstream.replay")
STAGE = "replay"
BATCH = 64  # items per add call: one embedding call, one graph round trip per batch
PROGRESS_EVERY_S = 0.5
# Commands a replay does not repeat: they act on files or on the replay machinery itself.
SKIPPED = (DumpCube, LoadCube, BackupCube, ReplayCube, PromoteCube, DropViews)
PROGRESS = re.compile(r"^(\d+)/(\d+) records")


def progress_of(update: MemoryUpdate) -> tuple[int, int] | None:
    """(done, total) of a ``replayed`` update, for progress bars."""
    match = PROGRESS.match(update.reason)
    return (int(match[1]), int(match[2])) if match else None


@dataclass
class Checkpoint:
    """How far one replay command got: its horizon and the records applied."""

    event_id: str
    ends: dict[str, int]
    applied: int = 0

    @staticmethod
    def path(deps: Deps, cube_id: str) -> Path:
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", cube_id)
        return deps.settings.data_dir / "replay" / f"{safe}.json"

    @classmethod
    def load(cls, deps: Deps, cube_id: str, event_id: str) -> Checkpoint | None:
        try:
            data = json.loads(cls.path(deps, cube_id).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if data.get("event_id") != event_id:
            return None  # another replay's: this one starts afresh
        return cls(event_id, {str(k): int(v) for k, v in data["ends"].items()},
                   int(data["applied"]))

    def save(self, deps: Deps, cube_id: str) -> None:
        path = self.path(deps, cube_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps({"event_id": self.event_id, "ends": self.ends,
                                   "applied": self.applied}), encoding="utf-8")
        tmp.replace(path)

    def clear(self, deps: Deps, cube_id: str) -> None:
        self.path(deps, cube_id).unlink(missing_ok=True)


class Announcer:
    """Publishes progress updates now (a stage's outputs go out only after its batch)."""

    def __init__(self, deps: Deps, cmd: ReplayCube, target: str) -> None:
        self.deps, self.cmd, self.target = deps, cmd, target
        self.producer: AIOKafkaProducer | None = None
        self.last = 0.0
        self.signer = Signer.of(deps.settings.security)

    async def start(self) -> None:
        if self.deps.bootstrap:
            self.producer = AIOKafkaProducer(
                bootstrap_servers=self.deps.bootstrap, acks="all",
                compression_type=self.deps.settings.kafka.producer_compression)
            await self.producer.start()

    async def stop(self) -> None:
        if self.producer is not None:
            await self.producer.stop()

    def update(self, done: int, total: int, note: str = "") -> MemoryUpdate:
        cmd = self.cmd
        return MemoryUpdate(
            event_id=derived_event_id("replayed", cmd.event_id, done), user_id=cmd.user_id,
            cube_id=cmd.cube_id, occurred_at=self.deps.clock(), action="replayed", stage=STAGE,
            reason=f"{done}/{total} records into {self.target}{note}", cause_event_id=cmd.event_id)

    async def progress(self, done: int, total: int) -> None:
        now = time.monotonic()
        if self.producer is None or (now - self.last < PROGRESS_EVERY_S and done < total):
            return
        self.last = now
        event = self.update(done, total)
        value = MEMORY_UPDATES.encode(event)
        await self.producer.send_and_wait(MEMORY_UPDATES.name(self.deps.settings), value,
                                          key=event.kafka_key,
                                          headers=headers_for(event, value, self.signer))

    async def publish_items(self, items: Sequence[ExtractedMemory]) -> None:
        """The shadow's extracted items go to its log, so the shadow replays too."""
        if self.producer is None or not items:
            return
        topic = MEMORY_ITEMS.name(self.deps.settings)
        values = [MEMORY_ITEMS.encode(i) for i in items]  # signed: the shadow verifies them
        futures = [await self.producer.send(topic, v, key=i.kafka_key,
                                            headers=headers_for(i, v, self.signer))
                   for i, v in zip(items, values, strict=True)]
        for fut in futures:
            await fut


async def replay_cube(cmd: ReplayCube, deps: Deps, stages: ReplayStages) -> list[Outgoing]:
    """Carry out one replay command with the live stages' logic; returns the final
    ``replayed`` announcement."""
    target = cmd.shadow or cmd.cube_id
    run_deps = _shadow_deps(cmd, deps) if cmd.shadow else deps
    specs = _sources(cmd)
    checkpoint = Checkpoint.load(deps, cmd.cube_id, cmd.event_id)
    if checkpoint is None:
        if not deps.bootstrap:
            raise RuntimeError("replay needs the broker address (Deps.bootstrap)")
        ends = await end_offsets(deps.settings, deps.bootstrap, cmd.cube_id, specs)
        checkpoint = Checkpoint(cmd.event_id, ends)
        if cmd.from_offset is None and cmd.from_time is None:
            nodes, vectors = await deps.store.clear_cube(target)  # drop the views
            log.info("replay of %s: dropped %d nodes and %d vectors of %s", cmd.cube_id, nodes,
                     vectors, target)
        checkpoint.save(deps, cmd.cube_id)
    else:
        log.info("replay of %s: resuming after %d records", cmd.cube_id, checkpoint.applied)
    assert deps.bootstrap  # noqa: S101 - checked above, or a checkpoint was written with it
    records = [r for r in _from(cmd, await read_cube(deps.settings, deps.bootstrap,
                                                     cmd.cube_id, specs, checkpoint.ends,
                                                     deps.verifier))
               if not isinstance(r.record.value, SKIPPED)]
    announcer = Announcer(deps, cmd, target)
    optimizer = stages.optimizer()  # the optimizer's windows, as the live worker keeps them
    await announcer.start()
    try:
        await announcer.progress(checkpoint.applied, len(records))
        while checkpoint.applied < len(records):
            step = _next_step(records, checkpoint.applied)
            await _apply(step, cmd, run_deps, announcer, stages, optimizer)
            checkpoint.applied += len(step)
            checkpoint.save(deps, cmd.cube_id)
            await announcer.progress(checkpoint.applied, len(records))
        final = announcer.update(len(records), len(records), " (done)")
    finally:
        await announcer.stop()
        if run_deps is not deps:
            await run_deps.llm.close()
    checkpoint.clear(deps, cmd.cube_id)
    log.info("replay of %s into %s: %d records applied", cmd.cube_id, target, len(records))
    return [Outgoing(MEMORY_UPDATES, final)]


def _sources(cmd: ReplayCube) -> list[TopicSpec]:
    if cmd.shadow:  # conversations are re-extracted; direct items come from memory.items
        return [CONVERSATIONS, MEMORY_ITEMS]
    return [MEMORY_ITEMS, MEMORY_COMMANDS, WORKING_MEMORY]


def _from(cmd: ReplayCube, records: list[LogRecord]) -> list[LogRecord]:
    """Records from ``from_offset`` (of the first source topic) or ``from_time`` on."""
    start_ms: int | None = None
    if cmd.from_time is not None:
        start_ms = int(cmd.from_time.timestamp() * 1000)
    if cmd.from_offset is not None:
        first = [r for r in records if r.rank == 0 and r.record.raw.offset >= cmd.from_offset]
        start_ms = first[0].timestamp_ms if first else None
        if start_ms is None:
            return []
    if start_ms is None:
        return records
    return [r for r in records if r.timestamp_ms >= start_ms]


def _next_step(records: Sequence[LogRecord], at: int) -> list[LogRecord]:
    """The next unit of work: a run of up to ``BATCH`` items, or one other record."""
    first = records[at]
    if first.spec is not MEMORY_ITEMS:
        return [first]
    step = [first]
    for record in records[at + 1: at + BATCH]:
        if record.spec is not MEMORY_ITEMS:
            break
        step.append(record)
    return step


async def _apply(step: list[LogRecord], cmd: ReplayCube, deps: Deps, announcer: Announcer,
                 stages: ReplayStages, optimizer: InlineOptimizer) -> None:
    first = step[0]
    out: list[Outgoing] = []
    if first.spec is MEMORY_ITEMS:
        items = [r.record for r in step]
        if cmd.shadow:
            items = [_into(r, cmd.shadow) for r in items if r.value.chunk_event_id is None]
        if items:
            out = await stages.add_memories(items, deps)
    elif first.spec is CONVERSATIONS:
        out = await _reextract(first.record, cmd, deps, announcer, stages)
    elif first.spec is MEMORY_COMMANDS:
        value = first.record.value
        if isinstance(value, DeleteCube):  # erased at that point of the log: start from there
            await deps.store.clear_cube(value.cube_id)
        elif not isinstance(value, SKIPPED):
            try:
                out = await stages.run_command(value, deps)
            except Exception as exc:  # noqa: BLE001 - as live: a refused command changes nothing
                log.info("replay of %s: command %s refused again: %s", cmd.cube_id,
                         value.event_id, exc)
    elif first.spec is WORKING_MEMORY:
        out = await stages.apply_replacements([first.record], deps)
    for outgoing in out:  # what the live runtime does once the outputs are sent (evictions)
        if outgoing.then is not None:
            await outgoing.then()
    await _reorganize(out, deps, optimizer)


def _into(record: Record[Any], cube: str) -> Record[Any]:
    value = record.value.model_copy(update={"cube_id": cube})
    return replace(record, value=value)


async def _reextract(record: Record[ConversationChunk], cmd: ReplayCube, deps: Deps,
                     announcer: Announcer, stages: ReplayStages) -> list[Outgoing]:
    assert cmd.shadow is not None  # noqa: S101 - only shadow replays read conversations
    chunk = record.value.model_copy(update={"cube_id": cmd.shadow})
    items = await stages.extract_chunk(chunk, record.origin, deps)
    await announcer.publish_items(items)
    return await stages.add_memories([Record(i, record.origin, record.raw) for i in items],
                                     deps)


async def _reorganize(out: Sequence[Outgoing], deps: Deps, optimizer: InlineOptimizer) -> None:
    """The optimizer's work (structure optimization at the same windows of event time,
    relations, FOLLOWS, aggregates; removals; merges), done in line; its announcements are
    not published again."""
    if not deps.settings.reorganize.enabled:
        return
    for outgoing in out:
        if isinstance(outgoing.event, ReorganizeEvent):
            await optimizer.apply(outgoing.event, deps)


def _shadow_deps(cmd: ReplayCube, deps: Deps) -> Deps:
    """The worker's dependencies with the shadow's model in place of its own."""
    changes: dict[str, Any] = {}
    if cmd.llm_model is not None:
        changes["model"] = cmd.llm_model
    if cmd.llm_base_url is not None:
        changes["base_url"] = cmd.llm_base_url
        changes["provider"] = "openai"
    settings = deps.settings.llm.model_copy(update=changes)
    if cmd.llm_model is not None and settings.provider != "openai":
        raise ModelUnavailable(f"replay {cmd.cube_id} into {cmd.shadow}: model "
                               f"{cmd.llm_model!r} needs an OpenAI-compatible endpoint (give "
                               "llm_base_url or set MEMSTREAM_LLM__BASE_URL on the worker); "
                               "the 'rules' stand-in has no models")
    return replace(deps, llm=create_llm(settings))


class ModelUnavailable(PermanentError):
    """A shadow replay asked for a model the worker has no endpoint to ask (refused, not
    silently replayed with the rules stand-in)."""
