"""Replay of a log written before a contract change: the records of ``tests/fixtures/log-v1``
(written by the code before the log was slimmed: uncompressed sealed values, full node
snapshots in every announcement) are published byte for byte into fresh topics, and a
replay with today's code must rebuild exactly the stores the old code had built (an
episode's vector aside, whose rule changed since: checked exactly, both ways).

Re-record only when the old format itself must change (``python -m tests.support.record_log``);
a new format gets a new fixture directory and this one stays.
"""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

from memstream.kafka.admin import ensure_topics
from memstream.security import keys
from memstream.sinks.dump import export_cube
from memstream.streams.replay.logic import replay_cube
from memstream.streams.worker import replay_stages
from memstream.topics.events import MemoryUpdate, ReplayCube
from memstream.topics.models import MemoryItem
from memstream.topics.registry import MEMORY_UPDATES
from tests.support import log_fixture
from tests.support.pipeline import Pipeline

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "log-v1"


async def test_a_log_recorded_by_the_v1_code_replays_into_identical_stores(
    pipeline: Pipeline,
) -> None:
    p = pipeline
    records, expected = log_fixture.read(FIXTURE)
    assert {r.topic for r in records} >= {"conversations", "memory.items", "memory.commands",
                                          "memory.updates"}
    # the old log's topics, under a prefix of their own (the worker does not consume them)
    kafka = p.settings.kafka.model_copy(update={"topic_prefix": f"v1{uuid.uuid4().hex[:6]}.",
                                                "partitions": expected["partitions"]})
    settings = p.settings.model_copy(update={"kafka": kafka})
    await ensure_topics(settings, p.bootstrap)
    await log_fixture.publish(settings, p.bootstrap, records)
    deps = dataclasses.replace(p.deps, settings=settings)
    ring = keys.activate(FIXTURE / "keys")  # the cubes' data keys of the recorded run
    try:
        for update in records:  # every old announcement still decodes
            if update.topic == MEMORY_UPDATES.suffix and update.value is not None:
                assert isinstance(MEMORY_UPDATES.decode(update.value), MemoryUpdate)
        for cube, want in expected["cubes"].items():
            assert not (await export_cube(deps.store, cube)).nodes
            await replay_cube(ReplayCube(user_id=cube), deps, replay_stages())
            got = log_fixture.store_view(await export_cube(deps.store, cube))
            assert got["nodes"].keys() == want["nodes"].keys()
            for node_id, node in want["nodes"].items():
                assert got["nodes"][node_id] == node, node_id
            assert got["edges"] == want["edges"]
            # Every vector is the embedding of its node's text (``MemoryItem.embedding_text``:
            # an episode's words without the time at the head of each line, since the v1
            # code). Compared with this machine's embedding of the same text, not with the
            # recorded digests: the local embedder's floats differ from the 4th decimal
            # between CPUs (the recording machine's and an AVX-512 one disagree on every
            # vector), while on one machine they are exact, whatever the batch.
            nodes = {i: MemoryItem.model_validate(n) for i, n in want["nodes"].items()}
            episodes = [i for i, n in nodes.items() if n.metadata.memory_type == "EpisodicMemory"]
            assert episodes and all(nodes[i].embedding_text != nodes[i].memory for i in episodes)
            fresh = (await deps.embedder.embed_passages(
                [n.embedding_text for n in nodes.values()])).tolist()
            assert got["vectors"] == {i: log_fixture.vector_digest(v)
                                      for i, v in zip(nodes, fresh, strict=True)}
            assert got["vectors"].keys() == want["vectors"].keys()
            assert {e[2] for e in got["edges"]} >= {"EXTRACTED_FROM", "MERGED_TO"}
            assert {n["metadata"]["status"] for n in got["nodes"].values()} >= {
                "activated", "archived"}
    finally:
        keys.release(ring.directory)
