"""Consumer-group members that outlived their process, and removing them.

A worker killed outright (SIGKILL, OOM) never sends LeaveGroup. Kafka drops such a member
once its session times out; the embedded noida-db broker never does: the dead member stays
in the group, often as its leader, and a restarted worker's SyncGroup waits forever for an
assignment the dead leader will not send (faust sits at ``[^--Recovery]: Starting...``).
So every worker names its consumers after its host and pid (``worker_client_id``), and a
starting worker first asks the group coordinator to drop members named after a process of
this host that no longer runs. Members of other hosts are left to the broker's session
timeout.
"""

from __future__ import annotations

import logging
import os
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError
from aiokafka.protocol.group import LeaveGroupRequest

from memstream.local.processes import pid_alive

log = logging.getLogger(__name__)

_TAG = re.compile(r"\.pid(?P<pid>\d+)@(?P<host>[^@]+)$")


def worker_client_id(base: str, pid: int | None = None, host: str | None = None) -> str:
    """``base`` tagged with this process: ``memstream.pid1234@myhost``."""
    return f"{base}.pid{pid if pid is not None else os.getpid()}@{host or socket.gethostname()}"


def owner_of(client_id: str) -> tuple[int, str] | None:
    """(pid, host) of a client id made by ``worker_client_id``, or None."""
    found = _TAG.search(client_id)
    return (int(found["pid"]), found["host"]) if found else None


@dataclass(frozen=True)
class StaleMember:
    group: str
    member_id: str
    client_id: str
    pid: int


def _is_dead_here(client_id: str, host: str) -> int | None:
    owner = owner_of(client_id)
    if owner is None or owner[1] != host or owner[0] == os.getpid():
        return None
    return None if pid_alive(owner[0]) else owner[0]


async def stale_members(admin: AIOKafkaAdminClient, groups: Iterable[str]) -> list[StaleMember]:
    """Members of ``groups`` whose client id names a process of this host that is gone."""
    host = socket.gethostname()
    found = []
    for group in dict.fromkeys(groups):
        for response in await admin.describe_consumer_groups([group]):
            for described in response.groups:
                for member in described[5]:
                    member_id, client_id = member[0], member[1]
                    pid = _is_dead_here(client_id, host)
                    if pid is not None:
                        found.append(StaleMember(group, member_id, client_id, pid))
    return found


async def remove_stale_members(bootstrap: str, groups: Iterable[str]) -> list[StaleMember]:
    """Ask the coordinator of each group to drop members left by dead processes of this host.

    Best effort: a broker that refuses is logged, and the caller starts anyway (a real
    Kafka broker drops the member itself after its session timeout)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="memstream-admin")
    removed: list[StaleMember] = []
    try:
        await admin.start()
        for member in await stale_members(admin, groups):
            node = await admin.find_coordinator(member.group)
            response = await admin._send_request_to_node(  # noqa: SLF001 - no public LeaveGroup
                node, LeaveGroupRequest(member.group, member.member_id))
            if response.error_code:
                log.warning("could not remove member %s of group %s (left by dead pid %d): "
                            "error %d", member.member_id, member.group, member.pid,
                            response.error_code)
                continue
            log.warning("removed member %s of group %s: its process (pid %d) is gone",
                        member.member_id, member.group, member.pid)
            removed.append(member)
    except KafkaError as exc:
        log.warning("could not look for members left by dead workers: %s", exc)
    finally:
        await admin.close()
    return removed
