"""Background work of the search caches waits for the requests being answered."""

from __future__ import annotations

import asyncio
import threading
import time

from memstream.streams.runtime.foreground import Foreground, paced


async def test_a_background_step_runs_at_once_when_no_request_is_in_flight() -> None:
    foreground = Foreground()
    await asyncio.wait_for(foreground.yield_to(max_wait_s=30), 1.0)
    started = time.perf_counter()
    await asyncio.to_thread(foreground.yield_in_thread, 30)
    assert time.perf_counter() - started < 1.0


async def test_a_background_step_waits_until_the_requests_in_flight_are_answered() -> None:
    foreground = Foreground()
    order: list[str] = []

    async def background() -> None:
        await foreground.yield_to(max_wait_s=30)
        order.append("background step")

    with foreground.request():
        with foreground.request():  # two at once: the step waits for both
            step = asyncio.create_task(background())
            await asyncio.sleep(0.05)
            order.append("first answered")
        await asyncio.sleep(0.05)
        assert not step.done()
        order.append("second answered")
    await asyncio.wait_for(step, 1.0)
    assert order == ["first answered", "second answered", "background step"]
    assert foreground.serving == 0


async def test_a_worker_that_is_never_idle_still_runs_each_step_after_the_longest_wait() -> None:
    foreground = Foreground()
    with foreground.request():
        started = time.perf_counter()
        await foreground.yield_to(max_wait_s=0.1)
        await asyncio.to_thread(foreground.yield_in_thread, 0.1)
        took = time.perf_counter() - started
    assert 0.18 <= took < 2.0


async def test_a_thread_step_is_released_when_the_request_is_answered() -> None:
    foreground = Foreground()
    released = threading.Event()

    def step() -> None:
        foreground.yield_in_thread(30)
        released.set()

    with foreground.request():
        thread = threading.Thread(target=step)
        thread.start()
        await asyncio.sleep(0.05)
        assert not released.is_set()
    await asyncio.to_thread(thread.join, 5)
    assert released.is_set()


def test_paced_pauses_once_every_so_many_steps() -> None:
    pauses = []
    step = paced(lambda: pauses.append(1), every=3)
    for _ in range(10):
        step()
    assert len(pauses) == 3
    paced(None)()  # no pause: a step does nothing
