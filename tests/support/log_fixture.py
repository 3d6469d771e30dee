"""A recorded log as a test fixture: the records of the source-of-truth topics, byte for
byte (key, value, headers, timestamp), the cubes' data keys, and what the stores held.

Recorded once by an older version of the code (``python -m tests.support.record_log DIR``),
then replayed by every later version: the proof that a log written before a contract change
still rebuilds the same stores.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from memstream.topics.models import CubeGraph, MemoryItem
from memstream.topics.registry import (
    BY_SUFFIX,
    CONVERSATIONS,
    MEMORY_COMMANDS,
    MEMORY_ITEMS,
    MEMORY_UPDATES,
    WORKING_MEMORY,
    TopicSpec,
)
from memstream.topics.settings import Settings

RECORDED: tuple[TopicSpec, ...] = (
    CONVERSATIONS, MEMORY_ITEMS, MEMORY_COMMANDS, WORKING_MEMORY, MEMORY_UPDATES)


@dataclass(frozen=True)
class Recorded:
    topic: str  # registry suffix
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]

    def to_json(self) -> dict[str, Any]:
        def b64(b: bytes | None) -> str | None:
            return None if b is None else base64.b64encode(b).decode()
        return {"topic": self.topic, "partition": self.partition, "offset": self.offset,
                "timestamp_ms": self.timestamp_ms, "key": b64(self.key),
                "value": b64(self.value), "headers": [[k, b64(v)] for k, v in self.headers]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Recorded:
        def unb64(s: str | None) -> bytes | None:
            return None if s is None else base64.b64decode(s)
        return cls(d["topic"], d["partition"], d["offset"], d["timestamp_ms"], unb64(d["key"]),
                   unb64(d["value"]), tuple((k, unb64(v) or b"") for k, v in d["headers"]))


async def read_topics(settings: Settings, bootstrap: str,
                      specs: tuple[TopicSpec, ...] = RECORDED) -> list[Recorded]:
    """Every record of ``specs`` (all partitions), in topic/partition/offset order."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    out: list[Recorded] = []
    try:
        # every partition looked up before the first assign (assign narrows the metadata)
        await consumer.topics()
        tps = [(spec, TopicPartition(spec.name(settings), partition)) for spec in specs
               for partition in sorted(consumer.partitions_for_topic(spec.name(settings))
                                       or ())]
        for spec, tp in tps:
            end = (await consumer.end_offsets([tp]))[tp]
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            while await consumer.position(tp) < end:
                batch = await consumer.getmany(tp, timeout_ms=1000)
                for msg in batch.get(tp, []):
                    if msg.offset < end:
                        out.append(Recorded(spec.suffix, tp.partition, msg.offset,
                                            msg.timestamp, msg.key, msg.value,
                                            tuple(msg.headers)))
    finally:
        await consumer.stop()
    return out


async def publish(settings: Settings, bootstrap: str, records: list[Recorded]) -> None:
    """Write recorded records into ``settings``' topics: same partition, key, value, headers
    and timestamp (offsets follow, as the topics start empty)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, max_request_size=8 * 1024 * 1024)
    await producer.start()
    try:
        for r in records:
            await producer.send_and_wait(
                BY_SUFFIX[r.topic].name(settings), r.value, key=r.key, partition=r.partition,
                timestamp_ms=r.timestamp_ms, headers=list(r.headers))
    finally:
        await producer.stop()


def vector_digest(vector: list[float]) -> str:
    """A vector at 4 decimals, hashed (float32 round trips agree to far more)."""
    return hashlib.sha256(",".join(f"{x:.4f}" for x in vector).encode()).hexdigest()[:16]


def node_view(node: MemoryItem) -> dict[str, Any]:
    """A node as JSON, without its usage."""
    return json.loads(node.model_dump_json(exclude={"metadata": {"usage"}}))  # type: ignore[no-any-return]


def store_view(cube: CubeGraph) -> dict[str, Any]:
    """What the stores hold of a cube, without usage (searches record it; a replay has none
    to repeat): every node as JSON, edges, and a digest per vector."""
    return {
        "nodes": {n.id: node_view(n) for n in sorted(cube.nodes, key=lambda n: n.id)},
        "edges": sorted([e.source, e.target, e.type] for e in cube.edges),
        "vectors": {k: vector_digest(v) for k, v in sorted(cube.vectors.items())},
    }


def write(directory: Path, records: list[Recorded], views: dict[str, dict[str, Any]],
          key_dir: Path | None, partitions: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / "records.jsonl").open("w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r.to_json(), sort_keys=True) + "\n")
    (directory / "stores.json").write_text(
        json.dumps({"partitions": partitions, "cubes": views}, indent=1, sort_keys=True) + "\n",
        encoding="utf-8")
    if key_dir is not None and key_dir.exists():
        shutil.copytree(key_dir, directory / "keys", dirs_exist_ok=True)


def read(directory: Path) -> tuple[list[Recorded], dict[str, Any]]:
    lines = (directory / "records.jsonl").read_text(encoding="utf-8").splitlines()
    stores = json.loads((directory / "stores.json").read_text(encoding="utf-8"))
    return [Recorded.from_json(json.loads(line)) for line in lines if line], stores
