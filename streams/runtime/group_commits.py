"""Offset commits that cannot throw a worker out of its consumer group.

faust commits from a timer (``worker.commit_interval_s``) while aiokafka rejoins the group
in another task, so a commit can go out in the middle of a rebalance. The embedded broker
refuses a commit sent in the generation a leaving member ended with ``ILLEGAL_GENERATION``
(Kafka would take it), and aiokafka answers that by forgetting its member id as well as
its generation. The consumer then wedged: measured with two plain aiokafka consumers, the
one that stayed neither took over the leaver's partitions nor returned from ``commit``
within 100 s; with two workers, the one that stayed rejoined as a new member in each of
generations 3, 4 and 5 and did not hold the stopped worker's partitions 30 s later.

So (``commit_only_in_a_settled_group``, patched once per process, aiokafka 0.14 only):

- a commit is not sent while the consumer joins the group (from its JoinGroup request
  until it has synced): it fails at once as
  ``RebalanceInProgressError``, which faust takes as "already rebalanced" (the records
  are redelivered from the last commit, as for any commit a rebalance overtakes);
- ``ILLEGAL_GENERATION`` for a commit makes the consumer rejoin as the same member, as
  Kafka's own client does; only ``UNKNOWN_MEMBER_ID`` makes it join as a new one;
- a refusal of a commit sent in a generation the consumer has since left changes
  nothing (it has joined the next one meanwhile).

A consumer given its partitions by hand (``assign``) is no group member: it commits with
no generation, and its commits go out as aiokafka sends them.

faust, for its part, records a refused commit as done (``Consumer._commit_offsets`` updates
its committed offsets whatever ``_commit`` answered) and has already dropped the acked
offsets behind it. When the refusal came back after a rebalance had handed the partition to
the same worker again, the broker's committed offset stayed behind while faust believed it
ahead: the redelivered records were no longer acked, and with nothing new on the partition
its offset was never committed (``wait_applied`` waited for a write that had been applied).
``refused_commits_are_retried`` puts back what faust knew before the refusal and its acked
offsets, so the next commit sends them again.

And faust can lose a record on its way to the agent after a takeover while handing over the
ones around it; the commit then waits for it for good. ``commits_need_every_offset`` fetches
such a partition again from its committed offset (``MissingRecords``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import aiokafka
from aiokafka import errors as kafka_errors
from aiokafka.consumer.group_coordinator import GroupCoordinator
from aiokafka.protocol.commit import OffsetCommitRequest
from faust.transport.consumer import Consumer, ThreadDelegateConsumer
from faust.types import TP

from memstream.streams.runtime.turns import pending

log = logging.getLogger("memstream.commits")

SUPPORTED_AIOKAFKA = ("0.14.",)
_PATCHED = "_memstream_settled_commits"
# (generation, member id) of the commit the current task is sending
_commit_sent_in: ContextVar[tuple[int, str] | None] = ContextVar("commit_sent_in", default=None)
_RETRIED = "_memstream_refused_commits_retried"
_STRICT = "_memstream_commits_need_every_offset"
# faust's committed offsets just before a refused commit's offsets overwrote them
_before_refusal: ContextVar[dict[TP, int | None] | None] = ContextVar("before_refusal",
                                                                       default=None)


def settled(coordinator: GroupCoordinator) -> bool:
    """Whether a group member may commit: it is in a generation and not in the middle of
    joining the next one (a commit from the revoke callback, before the join, still goes
    out: that is where a consumer commits what it finished). Not asked of a consumer given
    its partitions by hand: it is in no generation and always commits."""
    return (coordinator.generation != OffsetCommitRequest.DEFAULT_GENERATION_ID
            and not coordinator._performed_join_prepare)


def commit_only_in_a_settled_group() -> bool:
    """Patch aiokafka's group coordinator (see the module docstring); False, with a
    warning, on an aiokafka version whose private commit path was not checked."""
    if getattr(GroupCoordinator, _PATCHED, False):
        return True
    if not aiokafka.__version__.startswith(SUPPORTED_AIOKAFKA):
        log.warning("aiokafka %s: offset commits are not held back during rebalances "
                    "(checked on %s)", aiokafka.__version__, ", ".join(SUPPORTED_AIOKAFKA))
        return False
    send_commit = GroupCoordinator._do_commit_offsets
    reset = GroupCoordinator.reset_generation

    async def _do_commit_offsets(self: GroupCoordinator, assignment: Any,
                                 offsets: Any) -> None:
        if not offsets:
            return
        if not self._subscription.partitions_auto_assigned():
            await send_commit(self, assignment, offsets)  # assign(): not a group member
            return
        if not settled(self):
            raise kafka_errors.RebalanceInProgressError(
                f"{self.group_id}: not committed while the group rebalances")
        sent = (self.generation, self.member_id)
        token = _commit_sent_in.set(sent)
        try:
            await send_commit(self, assignment, offsets)
        except kafka_errors.UnknownMemberIdError:
            if sent == (self.generation, self.member_id):
                reset(self)  # the broker no longer knows this member: join as a new one
            raise
        except kafka_errors.IllegalGenerationError:
            if sent == (self.generation, self.member_id):
                # the group moved on without this member noticing yet: rejoin as the
                # same member (the broker still knows it), as Kafka's own client does
                self.generation = OffsetCommitRequest.DEFAULT_GENERATION_ID
                self.request_rejoin()
            raise
        finally:
            _commit_sent_in.reset(token)

    def reset_generation(self: GroupCoordinator) -> None:
        if _commit_sent_in.get() is not None:
            return  # a commit's refusal: decided by _do_commit_offsets above
        reset(self)

    GroupCoordinator._do_commit_offsets = _do_commit_offsets
    GroupCoordinator.reset_generation = reset_generation
    setattr(GroupCoordinator, _PATCHED, True)
    return True


def refused_commits_are_retried() -> None:
    """Patch faust's consumer (see the module docstring), once per process."""
    if getattr(Consumer, _RETRIED, False):
        return
    commit_offsets = Consumer._commit_offsets
    send = ThreadDelegateConsumer._commit

    async def _commit(self: ThreadDelegateConsumer, offsets: Any) -> bool:
        done = await send(self, offsets)
        before = _before_refusal.get()
        if not done and before is not None:
            # read after the refusal came back (a rebalance may have run meanwhile) and
            # before faust overwrites it: no await lies between the two
            before.update({tp: self._committed_offset.get(tp) for tp in offsets})
        return done

    async def _commit_offsets(self: Consumer, offsets: Any,
                              start_new_transaction: bool = True) -> bool:
        before: dict[TP, int | None] = {}
        token = _before_refusal.set(before)
        try:
            done = bool(await commit_offsets(self, offsets, start_new_transaction))
        finally:
            _before_refusal.reset(token)
        if before:
            _take_back(self, offsets, before)
        return done

    Consumer._commit_offsets = _commit_offsets  # type: ignore[method-assign]
    ThreadDelegateConsumer._commit = _commit  # type: ignore[method-assign]
    setattr(Consumer, _RETRIED, True)


def commits_need_every_offset() -> None:
    """Patch faust's consumer, once per process: a partition's commit waits for the record at
    its committed offset.

    faust computes the next commit from the acked offsets (``Consumer._new_offset``) and
    refuses one that would skip an unacked record only when the first acked offset is *more
    than one* past the committed offset: with the record at the committed offset unacked and
    the next one acked, it commits past it. A record there is unacked after a rebalance
    cleared it from the stream's buffer; with this check the commit waits until it has come
    back and been handled."""
    if getattr(Consumer, _STRICT, False):
        return
    new_offset = Consumer._new_offset

    def _new_offset(self: Consumer, tp: TP) -> int | None:
        acked = self._acked[tp]
        committed = self._committed_offset[tp]
        if acked and committed is not None and min(acked) > committed:
            _fetch_again_if_missing(self, tp, committed, min(acked))
            return None
        result: int | None = new_offset(self, tp)
        return result

    Consumer._new_offset = _new_offset  # type: ignore[method-assign]
    setattr(Consumer, _STRICT, True)


# How long the record at a partition's committed offset may stay unhandled while later
# records of the partition are handled, before the partition is fetched again from there.
MISSING_RECORD_S = 5.0


@dataclass
class MissingRecords:
    """When to fetch a partition again whose record at the committed offset never came.

    A runner handles each partition in log order, and after a rebalance every partition is
    fetched from its committed offset, so later records handled while the one at the
    committed offset is not, and nothing of the partition left to handle
    (``turns.pending``), means faust never handed that one over. Traced in the scale-out
    test under load: after a takeover, a partition's records 1–7 and 9–39 were handed over
    and handled, 8 never was, and the partition's commit stayed at 8 for good (``wait_applied``
    timed out on a write that was stored). Fetching the partition again from the committed
    offset hands it over; the records after it are handled twice, which changes nothing
    (every stage is effectively-once), and their acks are not counted twice.
    """

    wait_s: float = MISSING_RECORD_S
    clock: Callable[[], float] = time.monotonic
    _since: dict[TP, tuple[int, float]] = field(default_factory=dict)

    def due(self, tp: TP, committed: int) -> bool:
        """Whether ``tp`` should be fetched again from ``committed``: its record there has
        been missing for ``wait_s`` (and ``wait_s`` has passed since the last such fetch)."""
        now = self.clock()
        first = self._since.get(tp)
        if first is None or first[0] != committed:
            self._since[tp] = (committed, now)
            return False
        if now - first[1] < self.wait_s:
            return False
        self._since[tp] = (committed, now)
        return True

    def forget(self, tp: TP) -> None:
        """``tp`` is not idle: its wait starts again the next time it is."""
        self._since.pop(tp, None)


def _fetch_again_if_missing(consumer: Consumer, tp: TP, committed: int, first_acked: int) -> None:
    missing: MissingRecords | None = getattr(consumer, _MISSING, None)
    if missing is None:
        missing = MissingRecords()
        setattr(consumer, _MISSING, missing)
    if pending(consumer.app)[(tp.topic, tp.partition)]:
        # Records of the partition wait their turn: the missing one may be among them (faust
        # resumes fetching after a rebalance before it seeks back, so records past the
        # committed offset can be handled first). Only an idle partition is missing one.
        missing.forget(tp)
        return
    if not missing.due(tp, committed):
        return
    log.warning("%s[%d]: the record at offset %d was never handed over while records from %d "
                "on were handled; fetching the partition again from %d", tp.topic,
                tp.partition, committed, first_acked, committed)
    # on the consumer's thread (``seek_wait``), never under its fetch (runtime.read_offsets)
    task = asyncio.get_running_loop().create_task(consumer.seek_wait({tp: committed}))
    _seeks.add(task)
    task.add_done_callback(_seeks.discard)


_MISSING = "_memstream_missing_records"
_seeks: set[asyncio.Task[None]] = set()  # seeks under way (a task needs a reference)


def _take_back(consumer: Consumer, offsets: Any, before: dict[TP, int | None]) -> None:
    """Undo faust's record of a refused commit: its committed offsets as they were, and the
    offsets it had acked up to the refused one acked again (only for partitions it still
    holds; another owner is redelivered them from the broker's committed offset)."""
    held = consumer.assignment()
    for tp, refused in offsets.items():
        prior = before.get(tp)
        if prior is None:
            consumer._committed_offset.pop(tp, None)
        else:
            consumer._committed_offset[tp] = prior
        if tp not in held:
            continue
        index = consumer._acked_index[tp]
        again = [o for o in range(refused - 1 if prior is None else prior, refused)
                 if o not in index]
        index.update(again)
        consumer._acked[tp].extend(again)
    log.info("commit refused for %s: sent again with the next one",
             ", ".join(f"{tp.topic}[{tp.partition}]" for tp in offsets))
