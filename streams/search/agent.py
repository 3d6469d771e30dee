"""Search agent: ``requests`` → replies on each request's ``reply_to``.

Requests come through a request lane (``streams/runtime/lane.py``): each is answered as
soon as it arrives, concurrently with others; usage is recorded in the background
once the reply is sent, never delaying it, in batches (``streams/search/usage.py``).
"""

from __future__ import annotations

from memstream.kafka import tracing
from memstream.streams.runtime.batches import BoundTopics
from memstream.streams.runtime.stage import Deps, RawRecord, StageStats
from memstream.streams.runtime.tracing import request_span
from memstream.streams.search.logic import WaitApplied, answer
from memstream.streams.search.replying import send_replies
from memstream.streams.search.usage import UsageWriter
from memstream.topics.registry import REQUESTS


def register(bound: BoundTopics, deps: Deps, wait: WaitApplied) -> StageStats:
    stats = StageStats()
    usage = UsageWriter(deps)

    async def handle(raw: RawRecord) -> None:
        with request_span(raw) as span:  # the reply carries this span's context
            with deps.foreground.request():  # background cache work waits for it
                a = await answer(raw, deps, wait)
            if a.request is not None:
                span.set_attribute("memstream.cube_id", a.request.cube_id)
                span.set_attribute("memstream.op", str(getattr(a.request, "op", "?")))
            with tracing.span("memstream.search.reply"):
                # the reply first, through the lane's producer (sent at once); usage after
                if not await send_replies(bound, deps, a.outgoing, lane.producer):
                    return
        if a.request is not None and a.used:
            usage.add(a.request, a.used, a.cube_of)

    lane = bound.add_lane(REQUESTS, "search", handle, stats, deps.settings.search.max_in_flight,
                          after_stop=usage.close)
    return stats
