"""Erasure on disk: after a delete, rewrite the stores' own files so the text leaves them.

A deleted node is gone from every query at once, but not from the bytes the stores keep:
FalkorDB (redis) appends every write to its append-only file and keeps the last RDB
snapshot; Milvus Lite keeps deleted rows in its write-ahead log and data files until a
compaction. ``purge_deleted`` runs after ``delete_cube`` and ``delete`` of memories: it asks
each store that can to rewrite its files from what it holds now. Stores that cannot do so
from here (Neo4j, a Milvus server, Kafka) are covered in docs/erasure.md. ``left_of_cube``
counts what the stores still hold of an erased cube: an erasure is announced only at zero.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Protocol, cast, runtime_checkable

from memstream.sinks.memory_store import MemoryStore
from memstream.sinks.ports import VectorStore

log = logging.getLogger(__name__)

# How long a rewrite of the graph server's files may take before erasure is reported failed.
REWRITE_TIMEOUT_S = 300.0


@runtime_checkable
class PurgesDeleted(Protocol):
    """A store that can rewrite its own files without what was deleted."""

    async def purge_deleted(self, cube_id: str) -> None: ...


def _unwrapped(store: object) -> object:
    """The adapter under caching wrappers (``CachedVectorStore.inner``)."""
    while (inner := getattr(store, "inner", None)) is not None:
        store = inner
    return store


async def purge_deleted(store: MemoryStore, cube_id: str) -> list[str]:
    """Rewrite the files of every store that can; returns the names of those rewritten."""
    done = []
    for part in (_unwrapped(store.graph), _unwrapped(store.vectors)):
        if isinstance(part, PurgesDeleted):
            await part.purge_deleted(cube_id)
            done.append(type(part).__name__)
    return done


@dataclass(frozen=True)
class Left:
    """What the stores still hold of a cube after its erasure, counted by the stores."""

    nodes: int  # graph nodes of every type and status
    vectors: int  # in the vector store itself, beneath any cache in front of it

    def __bool__(self) -> bool:
        return bool(self.nodes or self.vectors)


async def left_of_cube(store: MemoryStore, cube_id: str) -> Left:
    """Count what is left of a cube in the graph and in the vector store (not its cache:
    a count through ``CachedVectorStore`` would answer from memory)."""
    counts = await store.graph.count_by_type(cube_id, status=None)
    vectors = cast(VectorStore, _unwrapped(store.vectors))
    return Left(nodes=sum(counts.values()), vectors=await vectors.count(cube_id))


def _info(raw: Any) -> dict[str, str]:
    """INFO's fields as strings (redis-py parses the reply into a dict; raw text otherwise)."""
    if isinstance(raw, dict):
        return {str(k): str(v) for k, v in raw.items()}
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    pairs = (line.split(":", 1) for line in text.splitlines() if ":" in line)
    return {k.strip(): v.strip() for k, v in pairs}


# Redis refuses a background rewrite or save while another child process (an automatic
# rewrite, a snapshot, another erasure on the same server) is running; those are retried.
_BUSY = ("in progress", "child process", "can't bgsave right now")


async def rewrite_redis_files(connection: Any, timeout_s: float = REWRITE_TIMEOUT_S) -> None:
    """BGREWRITEAOF (the new append-only file holds only live data; redis deletes the old
    ones), then BGSAVE (the RDB snapshot likewise), each started after the erasure and
    waited for. A command refused because another child process is at work (one that may
    have forked before the erasure) is sent again once that child is done. ``connection``:
    a ``redis.asyncio`` client."""
    from redis.exceptions import ResponseError

    async def persistence() -> dict[str, str]:
        return _info(await connection.execute_command("INFO", "persistence"))

    async def idle(*busy: str) -> dict[str, str]:
        while True:
            info = await persistence()
            if all(info.get(flag, "0") == "0" for flag in busy):
                return info
            await asyncio.sleep(0.02)

    children = ("aof_rewrite_in_progress", "aof_rewrite_scheduled", "rdb_bgsave_in_progress")

    async def started(command: str) -> None:
        while True:
            await idle(*children)
            try:
                await connection.execute_command(command)
                return
            except ResponseError as exc:
                if not any(word in str(exc).lower() for word in _BUSY):
                    raise
                log.debug("redis %s refused (%s); sending it again", command, exc)
                await asyncio.sleep(0.02)

    async with asyncio.timeout(timeout_s):
        if (await persistence()).get("aof_enabled") == "1":  # ``started`` waits for idle
            await started("BGREWRITEAOF")
            info = await idle("aof_rewrite_in_progress", "aof_rewrite_scheduled")
            if info.get("aof_last_bgrewrite_status") != "ok":
                raise RuntimeError(f"redis BGREWRITEAOF failed: {info}")
        await started("BGSAVE")
        info = await idle("rdb_bgsave_in_progress")
        if info.get("rdb_last_bgsave_status") != "ok":
            raise RuntimeError(f"redis BGSAVE failed: {info}")
