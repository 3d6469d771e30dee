"""faust's stall detector, told which partitions are idle on purpose.

faust checks every assigned partition each ``2.5 × commit_interval`` and logs an error
("Stream has not started processing" / "Stream stopped processing, or is slow") for one
whose stream took nothing for ``stream_processing_timeout`` while records wait. The
optimizer holds partitions back by design: it pauses the less urgent topics while urgent
events wait, and its agents wait for room while the one processor works through its
backlog or yields to ingestion. Reported as stalls, those buried real errors (2,110 in a
30-minute run). A partition is skipped here only while it is paused (``pause_partitions``)
or a registered check says it is held on purpose; any other partition, and a held one
whose holder is itself stuck, is still verified by faust as before.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable
from typing import Any

import faust

__all__ = ["hold_stall_reports", "install", "is_held"]

log = logging.getLogger(__name__)

HeldCheck = Callable[[Any], bool]
_CHECKS: weakref.WeakKeyDictionary[faust.App, list[HeldCheck]] = weakref.WeakKeyDictionary()


def hold_stall_reports(app: faust.App, check: HeldCheck) -> None:
    """``check(tp)`` True: the partition's stream is idle on purpose right now, not stalled."""
    install()
    _CHECKS.setdefault(app, []).append(check)


def is_held(app: faust.App, tp: Any) -> bool:
    """Whether faust should not verify ``tp`` now: paused, or held by a registered check."""
    if tp in getattr(app.consumer, "_paused_partitions", ()):
        return True
    return any(check(tp) for check in _CHECKS.get(app, ()))


def install() -> None:
    """Wrap faust's per-partition verification once (it composes with earlier wrappers)."""
    from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

    original = AIOKafkaConsumerThread.verify_event_path
    if getattr(original, "_memstream_held_aware", False):
        return

    def verify_event_path(self: AIOKafkaConsumerThread, now: float, tp: Any) -> None:
        app = getattr(self.consumer, "app", None)
        if app is not None and is_held(app, tp):
            log.debug("%s is held on purpose; not verified for stalls this round", tp)
            return None
        return original(self, now, tp)

    verify_event_path._memstream_held_aware = True  # type: ignore[attr-defined]
    AIOKafkaConsumerThread.verify_event_path = verify_event_path  # type: ignore[method-assign]
