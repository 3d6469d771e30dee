"""faust's stall detector against a real broker: a partition paused on purpose (as the
optimizer pauses its less urgent topics) is not reported as stalled; a stream that really
stopped processing still is. Two agents block on their first event while records keep
arriving; one's partition is paused, the other's is not."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from memstream.kafka.admin import ensure_topics
from memstream.streams.app import create_app
from memstream.streams.runtime.stall_check import hold_stall_reports
from memstream.topics.registry import REORGANIZE_LOW, SCHEDULE_ADD
from tests.stream.broker_fixtures import stream_settings

STALL_ERRORS = ("Stream has not started processing", "Stream stopped processing")


def stall_reports(caplog: pytest.LogCaptureFixture, topic: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR
            and topic in r.getMessage()
            and any(e in r.getMessage() for e in STALL_ERRORS)]


async def test_paused_partition_is_not_reported_stalled_but_a_real_stall_is(
        kafka_broker: str, topic_prefix: str, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    settings = stream_settings(kafka_broker, topic_prefix, tmp_path, partitions=1)
    settings.worker.commit_interval_s = 0.2  # faust checks every 2.5 commit intervals
    await ensure_topics(settings, kafka_broker)
    paused_topic, stalled_topic = REORGANIZE_LOW.name(settings), SCHEDULE_ADD.name(settings)
    app, bound = create_app(settings, kafka_broker)
    app.conf.stream_processing_timeout = 1.0
    app.conf.stream_buffer_maxsize = 1  # a blocked agent leaves records unfetched
    first: dict[str, asyncio.Event] = {paused_topic: asyncio.Event(),
                                       stalled_topic: asyncio.Event()}
    forever = asyncio.Event()

    for spec in (REORGANIZE_LOW, SCHEDULE_ADD):
        async def blocked(stream: object, name: str = spec.name(settings)) -> None:
            async for _ in stream:  # type: ignore[attr-defined]
                first[name].set()
                await forever.wait()  # stops processing: the stall faust should notice
        app.agent(bound[spec], name=f"blocked-{spec.suffix}")(blocked)
    held_checks: list[object] = []
    hold_stall_reports(app, lambda tp: held_checks.append(tp) is not None)  # never holds

    producer = AIOKafkaProducer(bootstrap_servers=kafka_broker)
    await producer.start()
    caplog.set_level(logging.ERROR)
    await app.start()
    try:
        for topic in (paused_topic, stalled_topic):
            await producer.send_and_wait(topic, b"first", key=b"k")
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in first.values())), 30)
        app.consumer.pause_partitions(
            [tp for tp in app.consumer.assignment() if tp.topic == paused_topic])
        for i in range(50):  # records wait behind both blocked streams
            for topic in (paused_topic, stalled_topic):
                await producer.send(topic, f"later {i}".encode(), key=b"k")
        await producer.flush()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while not stall_reports(caplog, stalled_topic) and loop.time() < deadline:
            await asyncio.sleep(0.25)
        await asyncio.sleep(2.0)  # several more rounds of the detector
    finally:
        forever.set()
        await producer.stop()
        await app.stop()
    assert stall_reports(caplog, stalled_topic), "a real stall was not reported"
    assert not stall_reports(caplog, paused_topic), stall_reports(caplog, paused_topic)
    assert held_checks, "registered checks were not consulted"
