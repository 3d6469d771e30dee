"""faust's read offsets, safe from a rebalance that overtakes the fetch loop.

faust's fetch loop (``Consumer._drain_messages``) reads a partition's read offset, hands the
record to its stream (an ``await``), then writes the record's offset as read. A rebalance
that runs during that ``await`` revokes the partition (faust drops its read offset) and,
when the partition comes back to the same worker, seeks it to the committed offset (faust
sets the read offset to it) — and then the loop's late write puts the old, higher offset
back. Records below it are fetched again and dropped as already read, the first one past it
is acked with a hole below it, and faust never commits past the hole: the partition's
committed offset stays where the rebalance left it (the scale-out test saw a worker stop
and the other never commit its last records).

``ReadOffsets`` counts rebalances (a drop, a delete or a bulk update of read offsets is
one) and ignores the fetch loop's write when its partition was read before the latest of
them: that write belongs to a generation the partition has left. Every other write (a seek,
faust's own bookkeeping) goes through.
"""

from __future__ import annotations

import logging
import sys
from collections import defaultdict
from typing import Any

from faust.transport.consumer import Consumer
from faust.types import TP

log = logging.getLogger("memstream.streams")

_PATCHED = "_memstream_read_offsets"
_FETCH_LOOP = Consumer._drain_messages.__code__


class ReadOffsets(defaultdict[TP, int | None]):
    """faust's ``Consumer._read_offset`` that refuses writes a rebalance overtook."""

    def __init__(self, *args: Any) -> None:
        super().__init__(lambda: None, *args)
        self.rebalances = 0
        self._read_in: dict[TP, int] = {}  # partition → rebalances when it was last read

    def __getitem__(self, tp: TP) -> int | None:
        value = super().__getitem__(tp)  # a missing key is set through __setitem__ first
        self._read_in[tp] = self.rebalances
        return value

    def __setitem__(self, tp: TP, value: int | None) -> None:
        read_in = self._read_in.pop(tp, None)
        if read_in is not None and read_in != self.rebalances \
                and sys._getframe(1).f_code is _FETCH_LOOP:
            log.debug("%s[%s]: read offset %s from before a rebalance ignored",
                      tp.topic, tp.partition, value)
            return
        super().__setitem__(tp, value)

    def __delitem__(self, tp: TP) -> None:
        self.rebalances += 1
        super().__delitem__(tp)

    def pop(self, tp: TP, *default: Any) -> Any:
        self.rebalances += 1
        return super().pop(tp, *default)

    def update(self, *args: Any, **kwargs: Any) -> None:
        self.rebalances += 1
        super().update(*args, **kwargs)


def guard_read_offsets() -> None:
    """Give every faust consumer created from now on a ``ReadOffsets`` (once per process)."""
    if getattr(Consumer, _PATCHED, False):
        return
    init = Consumer.__init__

    def __init__(self: Consumer, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self._read_offset = ReadOffsets(self._read_offset)

    Consumer.__init__ = __init__  # type: ignore[method-assign]
    setattr(Consumer, _PATCHED, True)
