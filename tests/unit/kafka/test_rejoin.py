"""How a member rejoins (memstream/kafka/rejoin.py): a heartbeat or SyncGroup answered
ILLEGAL_GENERATION keeps the member id, UNKNOWN_MEMBER_ID does not (a commit's refusal is
group_commits'), and an empty assignment means joining again. The functions are driven
directly, over stand-ins for what they wrap: nothing is patched process-wide here."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.protocol.commit import OffsetCommitResponse_v2
from aiokafka.protocol.group import HeartbeatResponse_v1, SyncGroupResponse_v1

from memstream.kafka import rejoin

ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS = 22, 25, 27
MEMBER = "memstream.pid1@host-0f67"


def heartbeat(code: int) -> HeartbeatResponse_v1:
    return HeartbeatResponse_v1(throttle_time_ms=0, error_code=code)


def sync(code: int) -> SyncGroupResponse_v1:
    return SyncGroupResponse_v1(throttle_time_ms=0, error_code=code, member_assignment=b"")


def commit(*codes: int) -> OffsetCommitResponse_v2:
    return OffsetCommitResponse_v2(topics=[("t", list(enumerate(codes)))])


class Coordinator:
    """What the patched methods touch of aiokafka's GroupCoordinator."""

    def __init__(self, response: Any = None, closing: bool = False) -> None:
        self.generation, self.member_id, self.rejoins = 7, MEMBER, 0
        self.response = response
        self._closing = SimpleNamespace(done=lambda: closing)

    def request_rejoin(self) -> None:
        self.rejoins += 1


@pytest.fixture
def aiokafka_stand_ins(monkeypatch: pytest.MonkeyPatch) -> None:
    """aiokafka's own ``_send_req`` (answering ``Coordinator.response``) and
    ``reset_generation`` (forgetting generation and member id), as the patch wraps them."""
    async def send(self: Coordinator, request: object) -> Any:
        return self.response

    def reset(self: Coordinator) -> None:
        self.generation, self.member_id = -1, ""
        self.request_rejoin()
    monkeypatch.setitem(rejoin._original, "send", send)
    monkeypatch.setitem(rejoin._original, "reset", reset)


def test_a_stale_generation_is_told_by_a_heartbeat_or_sync_answer() -> None:
    assert rejoin.stale_generation(heartbeat(ILLEGAL_GENERATION))
    assert rejoin.stale_generation(sync(ILLEGAL_GENERATION))
    assert not rejoin.stale_generation(heartbeat(UNKNOWN_MEMBER_ID))
    assert not rejoin.stale_generation(heartbeat(REBALANCE_IN_PROGRESS))
    assert not rejoin.stale_generation(sync(UNKNOWN_MEMBER_ID))
    assert not rejoin.stale_generation(commit(ILLEGAL_GENERATION))  # group_commits' part


@pytest.mark.usefixtures("aiokafka_stand_ins")
@pytest.mark.parametrize(("response", "kept"), [
    (heartbeat(ILLEGAL_GENERATION), True),
    (sync(ILLEGAL_GENERATION), True),
    (heartbeat(UNKNOWN_MEMBER_ID), False),
    (sync(UNKNOWN_MEMBER_ID), False),
    (None, False),  # a reset after no answer at all (leaving the group)
])
def test_only_a_stale_generation_keeps_the_member_id(response: Any, kept: bool) -> None:
    coordinator = Coordinator(response)

    async def answered_then_reset() -> None:  # as aiokafka's heartbeat and sync code do
        await rejoin._send_req(coordinator, object())  # type: ignore[arg-type]
        rejoin._reset_generation(coordinator)  # type: ignore[arg-type]
    asyncio.run(answered_then_reset())
    assert coordinator.generation == -1 and coordinator.rejoins == 1
    assert coordinator.member_id == (MEMBER if kept else "")


def test_an_empty_assignment_means_joining_again(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = iter([b"", b"\x00\x01", None])

    async def send_sync(self: Any, request: object) -> bytes | None:
        return next(answers)
    monkeypatch.setitem(rejoin._original, "sync", send_sync)
    coordinator = Coordinator()
    rebalance: Any = SimpleNamespace(group_id="g", _coordinator=coordinator)
    assert asyncio.run(rejoin._send_sync_group_request(rebalance, object())) is None
    assert coordinator.rejoins == 1
    assert asyncio.run(rejoin._send_sync_group_request(rebalance, object())) == b"\x00\x01"
    assert asyncio.run(rejoin._send_sync_group_request(rebalance, object())) is None
    assert coordinator.rejoins == 1  # a failed sync: aiokafka itself asked for the rejoin


@pytest.mark.usefixtures("aiokafka_stand_ins")
def test_a_stopping_consumer_forgets_its_member_id_and_does_not_rejoin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    coordinator = Coordinator(heartbeat(ILLEGAL_GENERATION), closing=True)

    async def answered_then_reset() -> None:
        await rejoin._send_req(coordinator, object())  # type: ignore[arg-type]
        rejoin._reset_generation(coordinator)  # type: ignore[arg-type]
    asyncio.run(answered_then_reset())
    assert coordinator.member_id == ""  # as aiokafka leaves it: no round kept alive

    async def send_sync(self: Any, request: object) -> bytes:
        return b""
    monkeypatch.setitem(rejoin._original, "sync", send_sync)
    stopping = Coordinator(closing=True)
    rebalance: Any = SimpleNamespace(group_id="g", _coordinator=stopping)
    assert asyncio.run(rejoin._send_sync_group_request(rebalance, object())) == b""
    assert stopping.rejoins == 0  # aiokafka's own handling, as before the patch
