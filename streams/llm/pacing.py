"""How many requests a worker sends a provider at once, and when it may send again.

One ``Pacer`` per provider instance: a semaphore bounds the requests in flight
(``llm.concurrency``), and a 429 or 503 answer's ``Retry-After`` (or OpenAI's
``retry-after-ms``) holds every request back until then, not only the one that was refused:
the limit is the provider's, for the whole worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime


def retry_after_s(headers: Mapping[str, str] | None, now: datetime | None = None) -> float | None:
    """Seconds the server asks to wait (``retry-after-ms``, or ``Retry-After`` as seconds or
    an HTTP date), or None when it does not say."""
    if not headers:
        return None
    lowered = {k.lower(): v for k, v in headers.items()}
    if (ms := lowered.get("retry-after-ms")) is not None:
        with contextlib.suppress(ValueError):
            return max(float(ms) / 1000, 0.0)
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max((when - (now or datetime.now(UTC))).total_seconds(), 0.0)


class Pacer:
    """Bounds the requests in flight and holds them all while the provider asked to wait."""

    def __init__(self, concurrency: int, max_wait_s: float) -> None:
        self._slots = asyncio.Semaphore(concurrency)
        self._max_wait_s = max_wait_s
        self._resume_at = 0.0  # time.monotonic() before which nothing is sent

    def hold(self, seconds: float) -> float:
        """Send nothing for ``seconds`` (capped); returns the wait applied."""
        wait = min(max(seconds, 0.0), self._max_wait_s)
        self._resume_at = max(self._resume_at, time.monotonic() + wait)
        return wait

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """A place among the requests in flight, once any hold has passed."""
        async with self._slots:
            while (delay := self._resume_at - time.monotonic()) > 0:
                await asyncio.sleep(delay)
            yield
