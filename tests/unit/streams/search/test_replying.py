"""A reply the broker refuses is answered with an error naming the limit, never dropped."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.errors import KafkaConnectionError, MessageSizeTooLargeError

from memstream.streams.runtime.stage import Outgoing
from memstream.streams.search.replying import send_replies
from memstream.topics.events import NodesResult, Reply
from memstream.topics.models import utcnow
from memstream.topics.registry import REPLIES
from memstream.topics.settings import Settings


class RefusingBroker:
    """Refuses the first send as aiokafka does a message over ``max_request_size``."""

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.sent: list[list[Outgoing]] = []

    async def send(self, outgoing: list[Outgoing], via: object = None) -> None:
        if not self.sent and self.error is not None:
            self.sent.append([])
            raise self.error
        self.sent.append(list(outgoing))


def reply() -> Outgoing:
    return Outgoing(REPLIES, Reply(user_id="u", cube_id="u", occurred_at=utcnow(),
                                   correlation_id="c1", ok=True, result=NodesResult(nodes=())),
                    key=b"client", topic="replies", partition=3)


async def test_a_refused_reply_becomes_an_error_reply_naming_the_limit() -> None:
    broker = RefusingBroker(MessageSizeTooLargeError("The message is 1199069 bytes"))
    deps: Any = SimpleNamespace(settings=Settings())
    assert await send_replies(broker, deps, [reply()]) is False  # type: ignore[arg-type]
    [sent] = broker.sent[1]
    assert isinstance(sent.event, Reply) and not sent.event.ok and sent.partition == 3
    assert sent.event.correlation_id == "c1" and sent.event.error is not None
    assert "MEMSTREAM_LIMITS__EVENT_BYTES" in sent.event.error.message
    assert "MessageSizeTooLargeError" in sent.event.error.message


async def test_a_refusal_wrapped_by_faust_is_recognised() -> None:
    from faust.exceptions import ProducerSendError

    try:
        raise MessageSizeTooLargeError("The message is 1199069 bytes")
    except MessageSizeTooLargeError as exc:
        wrapped = ProducerSendError(f"Error while sending: {exc!r}")
        wrapped.__cause__ = exc
    broker = RefusingBroker(wrapped)
    deps: Any = SimpleNamespace(settings=Settings())
    assert await send_replies(broker, deps, [reply()]) is False  # type: ignore[arg-type]
    assert not broker.sent[1][0].event.ok  # type: ignore[attr-defined]


async def test_an_outage_is_not_a_refusal() -> None:
    broker = RefusingBroker(KafkaConnectionError("down"))
    deps: Any = SimpleNamespace(settings=Settings())
    with pytest.raises(KafkaConnectionError):
        await send_replies(broker, deps, [reply()])  # type: ignore[arg-type]
