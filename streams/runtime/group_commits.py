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
"""

from __future__ import annotations

import logging
from contextvars import ContextVar
from typing import Any

import aiokafka
from aiokafka import errors as kafka_errors
from aiokafka.consumer.group_coordinator import GroupCoordinator
from aiokafka.protocol.commit import OffsetCommitRequest

log = logging.getLogger("memstream.commits")

SUPPORTED_AIOKAFKA = ("0.14.",)
_PATCHED = "_memstream_settled_commits"
# (generation, member id) of the commit the current task is sending
_commit_sent_in: ContextVar[tuple[int, str] | None] = ContextVar("commit_sent_in", default=None)


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
