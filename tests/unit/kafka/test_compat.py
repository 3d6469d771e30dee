"""The adaptive pause after empty fetches (the embedded broker never long-polls)."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import pytest

from memstream.kafka.compat import FetchPause, cancel_within


def test_a_busy_consumer_pauses_briefly_and_an_idle_one_the_full_jittered_pause() -> None:
    pause = FetchPause(pause_s=0.005, busy_pause_s=0.0005, busy_window_s=1.0)
    # records 0.2 s ago: busy, so a request/reply hop waits at most half a millisecond
    assert pause.after_empty(now=10.0, last_data=9.8) == 0.0005
    # never had records, or none for longer than the window: the idle pause, jittered so
    # consumers with the same pause do not fall into step
    idle = [pause.after_empty(now=10.0, last_data=None) for _ in range(200)]
    idle += [pause.after_empty(now=10.0, last_data=8.5) for _ in range(200)]
    assert all(0.0025 <= d <= 0.0075 for d in idle)
    assert max(idle) - min(idle) > 0.002


def test_the_busy_pause_never_exceeds_the_idle_one() -> None:
    pause = FetchPause(pause_s=0.001, busy_pause_s=0.01, busy_window_s=1.0)
    assert pause.after_empty(now=5.0, last_data=4.9) == 0.001


def test_idle_background_consumers_pause_longer_than_ones_someone_waits_on() -> None:
    pause = FetchPause(pause_s=0.005, busy_pause_s=0.0005, busy_window_s=1.0,
                       background_pause_s=0.025)
    waited_on = [pause.after_empty(10.0, None, latency=True) for _ in range(100)]
    background = [pause.after_empty(10.0, None, latency=False) for _ in range(100)]
    assert all(0.0025 <= d <= 0.0075 for d in waited_on)
    assert all(0.0125 <= d <= 0.0375 for d in background)
    # busy is busy, whichever kind: an ingest burst is not paced by the idle pause
    assert pause.after_empty(10.0, 9.9, latency=False) == 0.0005


def test_busy_background_consumers_poll_less_often_than_ones_someone_waits_on() -> None:
    pause = FetchPause(pause_s=0.005, busy_pause_s=0.0005, busy_window_s=1.0,
                       background_pause_s=0.025, background_busy_pause_s=0.005)
    assert pause.after_empty(10.0, 9.9, latency=True) == 0.0005
    assert pause.after_empty(10.0, 9.9, latency=False) == 0.005
    # still never longer than the idle pause
    assert FetchPause(pause_s=0.002, background_pause_s=0.002, background_busy_pause_s=0.01,
                      busy_window_s=1.0).after_empty(10.0, 9.9, latency=False) == 0.002


async def test_a_loop_that_never_ends_is_left_with_a_warning_not_waited_on_for_ever(
    caplog: pytest.LogCaptureFixture,
) -> None:
    done = asyncio.Event()

    async def swallow_every_cancel() -> None:
        while not done.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await done.wait()

    task = asyncio.create_task(swallow_every_cancel())
    await asyncio.sleep(0)
    with caplog.at_level(logging.WARNING, "memstream.kafka"):
        await cancel_within(task, "stubborn loop", seconds=1)
    try:
        assert not task.done()
        assert any("stubborn loop did not end within 1s" in r.getMessage()
                   for r in caplog.records)
    finally:
        done.set()
        await task


async def test_cancel_within_ends_a_loop_that_swallows_one_cancel(
    caplog: pytest.LogCaptureFixture,
) -> None:
    swallowed: list[bool] = []

    async def swallow_once() -> None:
        while True:
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                if swallowed:
                    raise
                swallowed.append(True)

    task = asyncio.create_task(swallow_once())
    await asyncio.sleep(0)
    with caplog.at_level(logging.WARNING, "memstream.kafka"):
        await cancel_within(task, "test loop", seconds=5)
    assert swallowed and task.cancelled()
    assert not caplog.records, [r.getMessage() for r in caplog.records]
