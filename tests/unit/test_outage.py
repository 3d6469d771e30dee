"""Outages pause a stage; bad events are dead-lettered: the split, and the worker tags."""

from __future__ import annotations

import pytest
from aiokafka.errors import KafkaConnectionError

from memstream.kafka.members import owner_of, worker_client_id
from memstream.sinks.ports import StoreError, StoreUnavailable
from memstream.streams.runtime.stage import (
    Outgoing,
    PermanentError,
    StageStats,
    is_outage,
    with_retries,
)


def _wrapped(cause: BaseException) -> StoreError:
    try:
        try:
            raise cause
        except Exception as exc:
            raise StoreError(f"graph write failed after 4 attempts: {exc}") from exc
    except StoreError as outer:
        return outer


@pytest.mark.parametrize("error", [
    StoreUnavailable("FalkorDB at redis://127.0.0.1:1 unreachable"),
    ConnectionRefusedError(111, "refused"),
    KafkaConnectionError("closed"),
    _wrapped(StoreUnavailable("down")),  # what MemoryStore raises after its own retries
])
def test_unreachable_dependencies_are_outages(error: BaseException) -> None:
    assert is_outage(error)


@pytest.mark.parametrize("error", [
    StoreError("unknown filter field 'x'"),
    ValueError("bad"),
    _wrapped(ValueError("dimension mismatch")),
    PermanentError("no such node"),
])
def test_wrong_events_are_not_outages(error: BaseException) -> None:
    assert not is_outage(error)


def test_a_cause_hidden_with_from_none_does_not_count() -> None:
    try:
        try:
            raise ConnectionResetError
        except ConnectionResetError:
            raise ValueError("rejected") from None
    except ValueError as exc:
        assert not is_outage(exc)


async def test_an_outage_pauses_without_using_up_the_retries() -> None:
    calls = 0

    async def flaky() -> list[Outgoing]:
        nonlocal calls
        calls += 1
        if calls <= 5:  # more failures than retries allow
            raise StoreUnavailable("FalkorDB unreachable")
        return []

    stats = StageStats()
    out, error, attempts = await with_retries("test", flaky, retries=1, backoff_s=0.001,
                                              stats=stats)
    assert (out, error, attempts) == ([], None, 1)
    assert stats.paused == 5 and stats.retries == 0


async def test_a_bad_event_still_fails_after_its_retries() -> None:
    async def bad() -> list[Outgoing]:
        raise StoreError("unknown filter field")

    _, error, attempts = await with_retries("test", bad, retries=2, backoff_s=0.001)
    assert isinstance(error, StoreError) and attempts == 3


def test_worker_client_ids_name_their_process() -> None:
    cid = worker_client_id("memstream-search", pid=4711, host="box-1.local")
    assert cid == "memstream-search.pid4711@box-1.local"
    assert owner_of(cid) == (4711, "box-1.local")
    assert owner_of("memstream") is None and owner_of("aiokafka-0.14.0") is None
