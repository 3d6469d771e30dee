"""Searches go first: background work of the search caches yields to searches in flight.

A big cube's episode index is built in the background after its first search
(``streams/core/episode_index.py``): pages read from the graph, then words and BM25 in a
thread. On a worker serving 10,000 cubes (``bench/tenancy.py``) the build of one cube of
6,824 memories ran through the next four searches, and the slowest search of the run, in
seven runs of eight, was the one it overlapped (342-535 ms, against 110 ms for the same
search alone): the pages' reads queued beside the search's, and the thread held the
interpreter lock for half of each 5 ms switch. ``Foreground`` counts the searches a
worker is answering; a background step waits until none is (at most ``max_wait_s``, so a
worker that is never idle still finishes the build), on the event loop or in the build's
thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator

# The longest a background step waits for searches to finish before it runs anyway.
YIELD_MAX_S = 0.25
# How often a waiting step checks whether it should stop waiting (``unless``).
CHECK_S = 0.02


class Foreground:
    """Requests a caller waits for, in flight now, and waits for none to be."""

    def __init__(self) -> None:
        self._serving = 0
        self._waiters: list[asyncio.Future[None]] = []  # background steps waiting, any loop
        self._idle_thread = threading.Event()  # set while none is in flight, for threads
        self._idle_thread.set()

    @property
    def serving(self) -> int:
        return self._serving

    @contextlib.contextmanager
    def request(self) -> Iterator[None]:
        """Around the answering of one request (on the event loop)."""
        self._serving += 1
        self._idle_thread.clear()
        try:
            yield
        finally:
            self._serving -= 1
            if not self._serving:
                self._idle_thread.set()
                waiters, self._waiters = self._waiters, []
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_result(None)

    async def yield_to(self, max_wait_s: float | None = None,
                       unless: Callable[[], bool] | None = None) -> None:
        """Wait, on the event loop, until no request is in flight (at most ``max_wait_s``,
        default ``YIELD_MAX_S``), or ``unless()`` holds (checked every ``CHECK_S``)."""
        deadline = time.monotonic() + (YIELD_MAX_S if max_wait_s is None else max_wait_s)
        while self._serving and not (unless is not None and unless()):
            left = deadline - time.monotonic()
            if left <= 0:
                return
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await asyncio.wait_for(waiter, left if unless is None else min(left, CHECK_S))
            except TimeoutError:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)

    def yield_in_thread(self, max_wait_s: float | None = None,
                        unless: Callable[[], bool] | None = None) -> None:
        """The same in a worker thread: blocks (the interpreter lock released) meanwhile."""
        deadline = time.monotonic() + (YIELD_MAX_S if max_wait_s is None else max_wait_s)
        while not self._idle_thread.is_set() and not (unless is not None and unless()):
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._idle_thread.wait(left if unless is None else min(left, CHECK_S))


# Items (turns, documents) a thread's background step handles between two pauses: ~2-5 ms.
PAUSE_EVERY = 256


def paced(pause: Callable[[], None] | None, every: int = PAUSE_EVERY) -> Callable[[], None]:
    """A step counter for a loop: calls ``pause`` once every ``every`` steps (none: nothing)."""
    if pause is None:
        return _nothing
    count = 0

    def step() -> None:
        nonlocal count
        count += 1
        if count >= every:
            count = 0
            pause()

    return step


def _nothing() -> None:
    return None
