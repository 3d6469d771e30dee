"""One real local Kafka broker (noida) per test session, and per-test topic prefixes.

Use from a conftest: ``from tests.stream.broker_fixtures import kafka_broker, topic_prefix``.
The fixture is synchronous on purpose: the broker is a plain child process, so it can be
started and stopped in a private event loop and shared by tests running in any loop.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from memstream.local.broker import BrokerError, LocalBroker, NoidaBroker
from memstream.topics.settings import KafkaSettings, Settings

T = TypeVar("T")

BROKER_START_TIMEOUT_S = 30.0


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` in a private loop that never becomes the thread's current loop."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


def start_broker(broker: LocalBroker) -> str:
    """Start ``broker`` or fail the test loudly, with the broker's log tail in the message."""
    try:
        return run_sync(broker.start())
    except BrokerError as exc:
        pytest.fail(f"could not start the {broker.kind} broker for the tests: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Bootstrap (``127.0.0.1:PORT``) of a noida broker shared by the whole session.

    Isolate tests with ``topic_prefix`` (topics) and unique group ids, never by restarting.
    """
    data_dir = tmp_path_factory.mktemp("kafka-noida")
    broker = NoidaBroker(data_dir, startup_timeout_s=BROKER_START_TIMEOUT_S)
    bootstrap = start_broker(broker)
    try:
        yield bootstrap
    finally:
        alive = broker.running
        run_sync(broker.stop())
        if not alive:
            pytest.fail(f"the session broker died during the tests; log: {broker.log_path}")


def unique_prefix(label: str = "test") -> str:
    """A topic prefix (legal Kafka characters, ending in ``.``) no other test uses."""
    safe = re.sub(r"[^A-Za-z0-9_-]+", "-", label).strip("-")[:40] or "test"
    return f"t.{safe}.{uuid.uuid4().hex[:8]}."


@pytest.fixture
def topic_prefix(request: pytest.FixtureRequest) -> str:
    """Per-test topic prefix built from the test's name, e.g. ``t.test_search-1a2b3c4d.``."""
    return unique_prefix(request.node.name)


def stream_settings(
    bootstrap: str, prefix: str, data_dir: Path | None = None, **kafka: Any
) -> Settings:
    """Settings pointing at ``bootstrap`` with ``prefix``; extra ``kafka`` fields override."""
    base: dict[str, Any] = {"kafka": KafkaSettings(
        bootstrap_servers=bootstrap, topic_prefix=prefix, **kafka
    )}
    if data_dir is not None:
        base["data_dir"] = data_dir
    return Settings(**base)
