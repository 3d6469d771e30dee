"""How fresh a store read must be: by default it sees every write acknowledged before it.

A Milvus server makes a read that must see every acknowledged write (its ``Strong``
consistency) wait until its query nodes have applied everything up to the read's start: a
wait of up to one time tick (200 ms by default), paid by each vector call in turn. A search
ran three of them one after another and took 0.6 s on a server (bench/tenancy.py), against
3 ms a call for a read that takes what the nodes hold (``Bounded``). A search that names no
write to wait for (no ``after``) promises no order with writes, so its request lane reads
relaxed (``relaxed_reads``); every other read (the stages deciding what to write, a search
with ``after``) stays exact. Adapters without such a wait ignore it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_RELAXED: ContextVar[bool] = ContextVar("memstream_relaxed_reads", default=False)


@contextmanager
def relaxed_reads() -> Iterator[None]:
    """Reads in this context (and in tasks and threads it starts) may miss writes
    acknowledged a moment ago."""
    token = _RELAXED.set(True)
    try:
        yield
    finally:
        _RELAXED.reset(token)


def reads_relaxed() -> bool:
    return _RELAXED.get()
