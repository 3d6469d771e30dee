"""Send a request's reply so that it arrives: a reply the broker refuses is replaced by one
that says why.

``answer`` keeps every reply under ``limits.event_bytes``, but the broker (or the producer's
``max_request_size``) may allow less than that setting says; a refused reply used to be
logged and dropped, and the client waited out its timeout. Now the client gets an error
reply naming the limit instead. An outage is not a refusal: it raises as before.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from memstream.streams.runtime.batches import BoundTopics
from memstream.streams.runtime.stage import Deps, Outgoing, is_outage
from memstream.streams.search.logic import too_large
from memstream.topics.events import Reply

log = logging.getLogger("memstream.search")


def _refusal(error: BaseException) -> KafkaError | None:
    """The broker's (or producer's) refusal for good behind ``error``; None for an outage
    or anything else."""
    if is_outage(error):
        return None
    current: BaseException | None = error
    while current is not None:
        if isinstance(current, KafkaError):
            return None if current.retriable else current
        current = current.__cause__
    return None


async def send_replies(bound: BoundTopics, deps: Deps, outgoing: Sequence[Outgoing],
                       via: AIOKafkaProducer | None = None) -> bool:
    """Send ``outgoing`` (through ``via``, when given); True when every reply went out as it
    was answered."""
    try:
        await bound.send(outgoing, via)
        return True
    except Exception as exc:  # faust wraps the producer's KafkaError in ProducerSendError
        refused = _refusal(exc)
        if refused is None:
            raise
    replaced = []
    for out in outgoing:
        if isinstance(out.event, Reply) and out.event.ok:
            size = len(out.spec.encode(out.event))
            why = f" (the broker refused it: {type(refused).__name__}: {refused})"
            out = Outgoing(out.spec, too_large(out.event, size, deps.settings.limits, why),
                           key=out.key, topic=out.topic, partition=out.partition)
        replaced.append(out)
    await bound.send(replaced, via)
    return False
