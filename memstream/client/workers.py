"""Is any worker there to answer a request? Asked of the request lane's consumer group.

A request nobody consumes would otherwise wait out the client's whole timeout (30 s) and
end with a guess. The client asks this only when a reply is late: the group's members,
less those named after a process of this host that no longer runs (the embedded broker
never expires a killed worker's membership; see ``memstream/kafka/members.py``). No live member
means no worker: the call fails at once, naming the group.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from dataclasses import dataclass

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from memstream.kafka.members import owner_of
from memstream.local.processes import pid_alive


@dataclass(frozen=True)
class GroupMembers:
    group: str
    live: int
    dead: tuple[int, ...]  # pids of this host's members whose process is gone

    def describe(self) -> str:
        if self.dead:
            pids = ", ".join(str(p) for p in self.dead)
            return (f"the consumer group {self.group!r} that answers requests has no live "
                    f"member (its members' processes, pid {pids}, are gone)")
        return f"the consumer group {self.group!r} that answers requests has no members"


def _dead_here(client_id: str, host: str) -> int | None:
    owner = owner_of(client_id)
    if owner is None or owner[1] != host or owner[0] == os.getpid():
        return None
    return None if pid_alive(owner[0]) else owner[0]


class WorkerProbe:
    """Counts the live members of a consumer group; one admin client, started on first use."""

    def __init__(self, bootstrap: str, group: str) -> None:
        self.bootstrap = bootstrap
        self.group = group
        self._admin: AIOKafkaAdminClient | None = None
        self._lock = asyncio.Lock()

    async def members(self) -> GroupMembers | None:
        """The group's live members now; None when the broker did not say."""
        try:
            async with self._lock:
                if self._admin is None:
                    admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap,
                                                client_id="memstream-probe")
                    await admin.start()
                    self._admin = admin
                responses = await self._admin.describe_consumer_groups([self.group])
        except (KafkaError, OSError):
            return None
        host = socket.gethostname()
        live, dead = 0, []
        for response in responses:
            for described in response.groups:
                for member in described[5]:
                    pid = _dead_here(member[1], host)
                    if pid is None:
                        live += 1
                    else:
                        dead.append(pid)
        return GroupMembers(self.group, live, tuple(dead))

    async def close(self) -> None:
        admin, self._admin = self._admin, None
        if admin is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(admin.close(), 5)
