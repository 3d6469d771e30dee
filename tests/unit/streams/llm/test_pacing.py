"""Retry-After parsing and the pacer that bounds and holds a worker's model requests."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

from memstream.streams.llm.pacing import Pacer, retry_after_s


def test_retry_after_in_seconds_milliseconds_or_as_a_date() -> None:
    now = datetime(2026, 11, 26, 9, 0, 0, tzinfo=UTC)
    assert retry_after_s({"Retry-After": "3"}) == 3.0
    assert retry_after_s({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert retry_after_s({"Retry-After": "Thu, 26 Nov 2026 09:00:05 GMT"}, now) == 5.0
    assert retry_after_s({"Retry-After": "-4"}) == 0.0
    assert retry_after_s({"Retry-After": "soon"}) is None
    assert retry_after_s({}) is None and retry_after_s(None) is None


async def test_a_hold_delays_every_request_and_concurrency_is_bounded() -> None:
    pacer = Pacer(concurrency=2, max_wait_s=0.3)
    assert pacer.hold(10) == 0.3  # capped
    in_flight, most = 0, 0
    started: list[float] = []

    async def request() -> None:
        nonlocal in_flight, most
        async with pacer.slot():
            started.append(time.monotonic())
            in_flight += 1
            most = max(most, in_flight)
            await asyncio.sleep(0.05)
            in_flight -= 1

    t0 = time.monotonic()
    await asyncio.gather(*(request() for _ in range(6)))
    assert min(started) - t0 >= 0.29  # nobody sent during the hold
    assert most == 2
