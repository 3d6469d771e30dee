"""How a group member rejoins after the embedded broker's coordinator moves the group on.

**A stale generation keeps the member id.** noida-db bumps a group's generation the moment
a member leaves (a worker's reaper removing a killed one, ``kafka.members``), so a
survivor's heartbeat or SyncGroup sent in the generation before is answered
ILLEGAL_GENERATION. aiokafka answers that by dropping its member id and joining as a new
member. Kafka would evict the abandoned id once the rebalance timeout passed; noida never
does (it expires a member only on that member's own late heartbeat), so the group never
completes a rebalance again: ``bench/scale.py`` with three workers took nothing over, the
groups stuck in ``PreparingRebalance`` or ``CompletingRebalance`` with a survivor listed
two or more times. Kafka's Java client keeps the id on ILLEGAL_GENERATION and drops it only
on UNKNOWN_MEMBER_ID (``AbstractCoordinator``: "don't reset generation member ID when
ILLEGAL_GENERATION, since the member ID is still valid"). ``streams.runtime.group_commits``
already did so for a commit's refusal; this does it for heartbeats and SyncGroup. Which
answer led to a reset is read from the coordinator's response just before it (no await lies
between the two).

**A stopping consumer is left alone.** Neither fix applies once its close has begun: it
forgets its member id and leaves as aiokafka would, so a group being stopped never starts
another round.

**An empty assignment is a round to redo.** noida can answer a member's SyncGroup with no
assignment at all (a member the leader did not assign, seen when workers start together);
aiokafka fails to decode it and its coordinator task dies, so the worker never finishes
starting. Such a member joins again instead, which starts a new round.

Process-wide (``patch_rejoin``), only on aiokafka versions whose private methods were read
(``SUPPORTED_AIOKAFKA``); elsewhere nothing changes and a warning says so.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any

import aiokafka
from aiokafka.consumer.group_coordinator import CoordinatorGroupRebalance, GroupCoordinator
from aiokafka.errors import IllegalGenerationError

log = logging.getLogger("memstream.kafka")

# aiokafka releases whose ``GroupCoordinator._send_req`` / ``reset_generation`` and
# ``CoordinatorGroupRebalance._send_sync_group_request`` (and the heartbeat and join code
# that calls them) were read and tested with this patch.
SUPPORTED_AIOKAFKA = ("0.14.",)
HEARTBEAT, SYNC_GROUP = 12, 14  # API keys of the answers whose ILLEGAL_GENERATION is ours
_PATCHED = "_memstream_rejoin_patched"

_original: dict[str, Any] = {}
_warned: list[str] = []


def stale_generation(response: Any) -> bool:
    """A heartbeat or SyncGroup answered ILLEGAL_GENERATION (a commit's refusal is
    ``group_commits``' to handle)."""
    return (getattr(response, "API_KEY", None) in (HEARTBEAT, SYNC_GROUP)
            and getattr(response, "error_code", 0) == IllegalGenerationError.errno)


async def _send_req(self: GroupCoordinator, request: Any) -> Any:
    self._memstream_stale_generation = False  # a request that fails leaves nothing behind
    response = await _original["send"](self, request)
    self._memstream_stale_generation = stale_generation(response)
    return response


def closing(coordinator: Any) -> bool:
    """The consumer is stopping: it leaves the group, it does not rejoin it."""
    fut = getattr(coordinator, "_closing", None)
    return fut is not None and fut.done()


def _reset_generation(self: GroupCoordinator) -> None:
    member_id = self.member_id
    _original["reset"](self)  # generation (and member id) cleared, a rejoin requested
    if member_id and getattr(self, "_memstream_stale_generation", False) and not closing(self):
        self.member_id = member_id


async def _send_sync_group_request(self: CoordinatorGroupRebalance, request: Any) -> Any:
    assignment = await _original["sync"](self, request)
    if assignment is not None and not assignment and not closing(self._coordinator):
        log.warning("group %s gave member %s no assignment at all; joining again",
                    self.group_id, self._coordinator.member_id)
        self._coordinator.request_rejoin()
        return None  # as after a failed SyncGroup: back off, then join again
    return assignment


def supported() -> bool:
    """The installed aiokafka is one the patch was checked against (else warn once)."""
    methods = {"send": GroupCoordinator._send_req, "reset": GroupCoordinator.reset_generation,
               "sync": CoordinatorGroupRebalance._send_sync_group_request}
    params = {"send": ["self", "request"], "reset": ["self"], "sync": ["self", "request"]}
    ok = (aiokafka.__version__.startswith(SUPPORTED_AIOKAFKA)
          and all(list(inspect.signature(m).parameters) == params[k]
                  for k, m in methods.items()))
    if not ok and not _warned:
        _warned.append(aiokafka.__version__)
        log.warning("aiokafka %s is not one the group rejoin patch was checked against; on "
                    "the embedded broker a killed worker's partitions may not be taken over",
                    aiokafka.__version__)
    return ok


def patch_rejoin() -> bool:
    """Both fixes for every aiokafka consumer of this process, once (other patches may wrap
    these methods afterwards). True if in place."""
    if getattr(GroupCoordinator, _PATCHED, False):
        return True
    if not supported():
        return False
    _original["send"] = GroupCoordinator._send_req
    _original["reset"] = GroupCoordinator.reset_generation
    _original["sync"] = CoordinatorGroupRebalance._send_sync_group_request
    GroupCoordinator._send_req = _send_req
    GroupCoordinator.reset_generation = _reset_generation
    CoordinatorGroupRebalance._send_sync_group_request = _send_sync_group_request
    setattr(GroupCoordinator, _PATCHED, True)
    return True
