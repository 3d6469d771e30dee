"""Fixtures for every stream test: one session-wide local broker, per-test topic prefixes."""

from tests.stream.broker_fixtures import kafka_broker, topic_prefix

__all__ = ["kafka_broker", "topic_prefix"]
