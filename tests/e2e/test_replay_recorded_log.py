"""Replay of a log written before a contract change: the records of ``tests/fixtures/log-v1``
(written by the code before the log was slimmed: uncompressed sealed values, full node
snapshots in every announcement) are published byte for byte into fresh topics, and a
replay with today's code must rebuild exactly the stores the old code had built (an
episode's vector aside, whose rule changed since: checked exactly, both ways; and a
statement that explicitly replaces an earlier one, which closes it since validity in time:
``under_validity`` changes only the pairs the old code had linked as suspected conflicts).

Re-record only when the old format itself must change (``python -m tests.support.record_log``);
a new format gets a new fixture directory and this one stays.
"""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path
from typing import Any

from memstream.kafka.admin import ensure_topics
from memstream.security import keys
from memstream.sinks.dump import export_cube
from memstream.streams.replay.logic import replay_cube
from memstream.streams.worker import replay_stages
from memstream.topics.events import MemoryUpdate, ReplayCube
from memstream.topics.ids import working_copy_id
from memstream.topics.models import MemoryItem
from memstream.topics.registry import MEMORY_UPDATES
from tests.support import log_fixture
from tests.support.pipeline import Pipeline

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "log-v1"


def under_validity(want: dict[str, Any], got: dict[str, Any]) -> dict[str, Any]:
    """What the v1 code built, with the one rule changed since: a statement that explicitly
    replaces an earlier one (v1 linked the two by a suspected ``CONFLICT``, both current)
    closes it — valid until the new one began, ``superseded_by`` it, out of working memory,
    the edge ``SUPERSEDES``. Only pairs v1 linked so are changed, each checked."""
    nodes, edges = dict(want["nodes"]), [list(e) for e in want["edges"]]
    vectors = dict(want["vectors"])
    for node_id, node in got["nodes"].items():
        new_id = node["metadata"].get("superseded_by")
        if new_id is None:
            continue
        assert [new_id, node_id, "CONFLICT"] in edges, node_id  # v1's suspicion, now a change
        edges[edges.index([new_id, node_id, "CONFLICT"])] = [new_id, node_id, "SUPERSEDES"]
        new = MemoryItem.model_validate(nodes[new_id]).metadata
        closed = MemoryItem.model_validate(nodes[node_id]).evolve(
            valid_until=new.valid_from or new.memory_time or new.created_at,
            superseded_by=new_id)
        nodes[node_id] = log_fixture.node_view(closed)
        copy = working_copy_id(node_id)
        assert copy in nodes
        del nodes[copy]
        vectors.pop(copy, None)
    return {**want, "nodes": nodes, "edges": sorted(edges), "vectors": vectors}


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
            want = under_validity(want, got)
            assert got["nodes"].keys() == want["nodes"].keys()
            for node_id, node in want["nodes"].items():
                # a field added to the model since reads as its default in the old snapshot
                node = log_fixture.node_view(MemoryItem.model_validate(node))
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
