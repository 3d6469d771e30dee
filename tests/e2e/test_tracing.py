"""Traces across the pipeline (issue 26): one search and one ingestion each make one
connected trace, from the client call through every stage, the context carried in Kafka
headers between processes' worth of consumers. Real broker, FalkorDB, Milvus Lite and an
in-process worker, whose spans (and the client's) go to an in-memory exporter."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest_asyncio
from aiokafka import AIOKafkaConsumer, TopicPartition
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memstream.kafka import tracing
from memstream.topics.events import WriteToken
from tests.support.pipeline import Pipeline, pipeline_settings, run_pipeline


@pytest_asyncio.fixture
async def traced(tmp_path: Path, kafka_broker: str, falkordb_uri: str
                 ) -> AsyncIterator[tuple[Pipeline, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    settings = pipeline_settings(tmp_path, kafka_broker, falkordb_uri,
                                 tracing={"enabled": True})
    assert tracing.configure(settings.tracing, "memstream-test", exporter)
    try:
        async for p in run_pipeline(settings):
            yield p, exporter
    finally:
        tracing.shutdown()  # the next tests run untraced


def one(spans: Sequence[ReadableSpan], name: str) -> ReadableSpan:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, (name, [s.name for s in spans])
    return found[0]


def children(spans: Sequence[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    return [s for s in spans if s.parent is not None
            and s.parent.span_id == parent.context.span_id]


def names(spans: Sequence[ReadableSpan]) -> set[str]:
    return {s.name for s in spans}


def of_trace(exporter: InMemorySpanExporter, root: ReadableSpan) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans()
            if s.context.trace_id == root.context.trace_id]


async def wait_for_span(exporter: InMemorySpanExporter, root: ReadableSpan, name: str,
                        timeout_s: float = 60.0) -> list[ReadableSpan]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        spans = of_trace(exporter, root)
        if name in names(spans):
            return spans
        await asyncio.sleep(0.1)
    raise AssertionError(f"no {name} span in the trace: {sorted(names(of_trace(exporter, root)))}")


async def record_headers(pipeline: Pipeline, token: WriteToken) -> list[tuple[str, bytes]]:
    consumer = AIOKafkaConsumer(bootstrap_servers=pipeline.bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(token.topic, token.partition)
        consumer.assign([tp])
        consumer.seek(tp, token.offset)
        record = await consumer.getone(tp)
        return list(record.headers)
    finally:
        await consumer.stop()


async def test_an_ingestion_and_a_search_each_make_one_connected_trace(
    traced: tuple[Pipeline, InMemorySpanExporter],
) -> None:
    pipeline, exporter = traced
    client = pipeline.client

    token = await client.add_messages("alice", [
        {"role": "user", "content": "My sister Carla moved to Lisbon in March."},
        {"role": "user", "content": "I water the tomatoes every morning before work."}])
    await client.wait_applied(token, timeout=60)
    add = one(exporter.get_finished_spans(), "memstream.client.add_messages")
    assert add.parent is None  # the trace starts at the client call
    spans = await wait_for_span(exporter, add, "memstream.reorganize")

    # the context travels in the record itself, as a W3C traceparent header
    headers = dict(await record_headers(pipeline, token))
    version, trace_id, parent_id, _flags = headers["traceparent"].decode().split("-")
    publish_span = one(children(exporter.get_finished_spans(), add),
                       "memstream.client.publish conversations")
    assert (version, int(trace_id, 16), int(parent_id, 16)) == (
        "00", add.context.trace_id, publish_span.context.span_id)

    # client call -> publish -> extraction -> add stage -> optimizer, each a child of the last
    publish = one(children(spans, add), "memstream.client.publish conversations")
    extraction = one(children(spans, publish), "memstream.extraction")
    assert extraction.attributes["memstream.cube_id"] == "alice"
    assert "memstream.llm extraction" in names(children(spans, extraction))
    adds = [s for s in children(spans, extraction) if s.name == "memstream.memory.add"]
    assert adds, sorted(names(children(spans, extraction)))
    under_add = {s.name for a in adds for s in children(spans, a)}
    assert {"memstream.memory.embed", "memstream.memory.write",
            "memstream.memory.judge"} <= under_add, under_add
    judge = next(s for a in adds for s in children(spans, a) if s.name == "memstream.memory.judge")
    # one review of the chunk's new facts, then each fact's write: both under the add stage
    assert judge.parent is not None
    assert judge.parent.span_id in {a.context.span_id for a in adds}
    optimizer = [s for a in adds for s in children(spans, a) if s.name == "memstream.reorganize"]
    assert optimizer, "the optimizer's span is not a child of the add stage's"
    assert {"memstream.optimizer.organize"} <= {s.name for o in optimizer
                                                 for s in children(spans, o)}

    # a search: client call -> request lane -> recalls, fusion, reply
    found = await client.search("alice", "where does Carla live?")
    assert found
    search = one(exporter.get_finished_spans(), "memstream.client.search")
    spans = await wait_for_span(exporter, search, "memstream.search.reply")
    publish = one(children(spans, search), "memstream.client.publish requests")
    request = one(children(spans, publish), "memstream.search.request")
    steps = names(children(spans, request))
    assert {"memstream.search.embed", "memstream.search.recall.vector",
            "memstream.search.recall.keyword", "memstream.search.recall.graph",
            "memstream.search.fusion", "memstream.search.materialize",
            "memstream.search.reply"} <= steps, steps
    # the search's trace and the ingestion's are apart; nothing of either is orphaned
    assert search.context.trace_id != add.context.trace_id
    for span in of_trace(exporter, search) + of_trace(exporter, add):
        assert span.parent is None or span.parent.span_id in {
            s.context.span_id for s in exporter.get_finished_spans()}, span.name
    # the reply's wait is in the client's span: it ends after the worker's request span
    assert search.end_time is not None and request.end_time is not None
    assert search.end_time >= request.end_time
