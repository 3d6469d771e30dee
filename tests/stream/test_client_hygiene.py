"""The client leaves the application's own Kafka consumers alone, reads topics by name, and
exports what users catch and publish."""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

import aiokafka
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.consumer.fetcher import Fetcher

from memstream.client.client import ClientError, MemoryClient
from memstream.kafka import compat as kafka_compat
from memstream.kafka.compat import STOP_S
from memstream.local.broker import NoidaBroker
from memstream.topics.events import MemoryUpdate
from memstream.topics.settings import Settings


def settings(tmp_path: Path, bootstrap: str, **kafka: object) -> Settings:
    tag = uuid.uuid4().hex[:8]
    return Settings(data_dir=tmp_path, app_id=f"hyg-{tag}",
                    kafka={"bootstrap_servers": bootstrap, "topic_prefix": f"h{tag}.",
                           "partitions": 1, **kafka})


async def test_the_client_patches_only_its_own_consumers(tmp_path: Path,
                                                         kafka_broker: str) -> None:
    kafka_compat.restore_fetches()  # an in-process worker of an earlier test patched it
    plain = Fetcher._proc_fetch_request
    s = settings(tmp_path, kafka_broker)
    async with MemoryClient(s) as client:
        assert await client.history("memory.updates") == []
        assert await client.history(f"{s.kafka.topic_prefix}dead-letter") == []
        replies = await client._reply_listener()
        ours = replies._consumer  # type: ignore[attr-defined]
        assert ours is not None and "_proc_fetch_request" in vars(ours._fetcher)
        users = AIOKafkaConsumer(bootstrap_servers=kafka_broker, enable_auto_commit=False)
        await users.start()
        users.assign([TopicPartition(f"{s.kafka.topic_prefix}memory.updates", 0)])
        try:
            assert Fetcher._proc_fetch_request is plain  # nothing process-wide
            assert "_proc_fetch_request" not in vars(users._fetcher)
            assert await users.getmany(timeout_ms=200) == {}  # (aiokafka: stop() right
        finally:                                                # after start() raises)
            await users.stop()
        with pytest.raises(ValueError, match="unknown topic 'memory.update'"):
            await client.history("memory.update")


async def test_the_pause_is_for_the_embedded_broker_and_known_aiokafka_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    k = settings(tmp_path, "127.0.0.1:9092").kafka
    assert kafka_compat.needs_pause(k, "127.0.0.1:9092")
    assert not kafka_compat.needs_pause(k, "kafka:9092")
    assert not kafka_compat.needs_pause(k, "127.0.0.1:9092,kafka-2:9092")
    always = k.model_copy(update={"fetch_pause": "always"})
    never = k.model_copy(update={"fetch_pause": "never"})
    assert kafka_compat.needs_pause(always, "kafka:9092")
    assert not kafka_compat.needs_pause(never, "127.0.0.1:9092")
    assert kafka_compat.supported()
    monkeypatch.setattr(aiokafka, "__version__", "0.15.0")
    monkeypatch.setattr(kafka_compat, "_warned", [])
    kafka_compat.restore_fetches()
    plain = Fetcher._proc_fetch_request
    assert not kafka_compat.supported()
    kafka_compat.pause_empty_fetches(0.01)
    assert Fetcher._proc_fetch_request is plain  # an unchecked aiokafka is never patched


def test_public_errors_and_events_are_exported() -> None:
    import memstream

    for name in ("MemoryClient", "Settings", "MemoryServiceError", "ClientError",
                 "LimitExceeded", "WriteToken", "UpdateNode", "DeleteNodes", "DeleteCube",
                 "DumpCube", "LoadCube", "BackupCube", "ReplaceWorkingMemory", "MemoryUpdate",
                 "DeadLetter"):
        assert name in memstream.__all__ and hasattr(memstream, name)
    assert issubclass(memstream.LimitExceeded, ValueError)
    assert issubclass(memstream.MemoryServiceError, memstream.ClientError)
    assert memstream.MemoryUpdate is MemoryUpdate


@pytest.mark.timeout(180)
async def test_a_client_whose_broker_dies_gets_errors_in_time_and_still_closes(
    tmp_path: Path,
) -> None:
    # CI once hung for an hour: waiting for a write against a dead broker asked the group
    # coordinator forever, and a reply consumer fetching from a dead node never stopped.
    broker = NoidaBroker(tmp_path / "broker")
    bootstrap = await broker.start()
    client = MemoryClient(settings(tmp_path, bootstrap))
    fresh = MemoryClient(settings(tmp_path, bootstrap))  # connected, nothing read yet
    await client.start()
    await fresh.start()
    try:
        token = await client.add_memories("u", ["a fact"])
        with pytest.raises(ClientError, match="is a worker running"):
            await client.wait_applied(token, timeout=1)  # the connections are up
        with pytest.raises(ClientError, match="within 1"):
            await client.search("u", "fact", timeout=1)
        assert broker.pid is not None
        os.kill(broker.pid, signal.SIGKILL)

        started = time.monotonic()
        with pytest.raises(ClientError, match=f"broker at {bootstrap} did not answer"):
            await client.wait_applied(token, timeout=3)
        assert time.monotonic() - started < 10
        started = time.monotonic()
        with pytest.raises(ClientError, match="no reply to SearchRequest within 3"):
            await client.search("u", "fact", timeout=3)
        assert time.monotonic() - started < 10
        # a client whose first read comes after the broker died is told so, in time
        started = time.monotonic()
        gone = f"broker at {bootstrap} (could not be reached|did not answer within 3s)"
        with pytest.raises(ClientError, match=f"broker at {bootstrap} could not be reached"):
            await fresh.history("memory.updates")
        with pytest.raises(ClientError, match=gone):
            await fresh.wait_applied(token, timeout=3)
        with pytest.raises(ClientError, match=gone):
            await fresh.search("u", "fact", timeout=3)
        assert time.monotonic() - started < 10
    finally:
        started = time.monotonic()
        await client.close()
        assert time.monotonic() - started < 3 * STOP_S
        started = time.monotonic()
        await fresh.close()
        assert time.monotonic() - started < STOP_S + 1
        await broker.stop()
