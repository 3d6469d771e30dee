"""Cube access checks for every request and every write.

A request whose user may not read the cube gets an error reply naming the cube; a write
(conversation, memory, command) whose user may not write it is dead-lettered with the
same message. The first write to a cube with no access record makes its writer the owner.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from memstream.security.access import CubeAccess
from memstream.streams.runtime.stage import Deps, PermanentError, Record
from memstream.topics.events import DumpCube, LifecycleSweep, ShareCube, UnshareCube

log = logging.getLogger("memstream.access")


class AccessDenied(PermanentError):
    """The user may not use the cube this way."""


async def check_read(deps: Deps, user_id: str, cube_id: str) -> None:
    access = await deps.store.graph.get_cube_access(cube_id)
    if access is None:
        # No owner recorded: the user's own default cube, a cube nobody wrote yet, or one
        # written before access records existed (its memories name their user).
        if user_id == cube_id:
            return
        owner = await earlier_owner(deps, cube_id)
        if owner is None or owner == user_id:
            return
        raise AccessDenied(f"user {user_id!r} may not read cube {cube_id!r} "
                           f"(owned by {owner!r}, not shared with {user_id!r})")
    if not access.may_read(user_id):
        raise AccessDenied(f"user {user_id!r} may not read cube {cube_id!r} "
                           f"(owned by {access.owner!r}, not shared with {user_id!r})")


async def check_write(deps: Deps, user_id: str, cube_id: str) -> None:
    access = await deps.store.graph.get_cube_access(cube_id)
    if access is None:
        owner = await earlier_owner(deps, cube_id) or user_id  # else the first writer
        access = CubeAccess(cube_id=cube_id, owner=owner)
        await deps.store.graph.set_cube_access(access)
        log.info("cube %s: owner %s", cube_id, owner)
    if not access.may_write(user_id):
        raise AccessDenied(f"user {user_id!r} may not write cube {cube_id!r} "
                           f"(owned by {access.owner!r}, not shared with {user_id!r} "
                           "for writing)")


async def earlier_owner(deps: Deps, cube_id: str) -> str | None:
    """The user of a cube's memories written before it had an access record (None: empty)."""
    nodes = await deps.store.graph.find_nodes(cube_id, limit=1)
    return nodes[0].metadata.user_id if nodes else None


async def check_records(deps: Deps, records: Sequence[Record[Any]]) -> None:
    """Every record's user may do what it asks with its cube; else ``AccessDenied``."""
    checked: set[tuple[str, str, str]] = set()
    for record in records:
        event = record.value
        match event:
            case ShareCube() | UnshareCube():
                continue  # only the owner: checked when applied
            case LifecycleSweep() if event.user_id == event.cube_id:
                continue  # the lifecycle timer's own sweep (it applies the cube's policy only)
            case DumpCube():
                need = "read"
            case _:
                need = "write"
        key = (event.user_id, event.cube_id, need)
        if key in checked:
            continue
        checked.add(key)
        if need == "read":
            await check_read(deps, event.user_id, event.cube_id)
        else:
            await check_write(deps, event.user_id, event.cube_id)


async def share(deps: Deps, cmd: ShareCube | UnshareCube) -> str:
    """Apply a share or unshare by the cube's owner; returns what changed, in words."""
    access = await deps.store.graph.get_cube_access(cmd.cube_id)
    if access is None:
        if cmd.user_id != cmd.cube_id:
            raise AccessDenied(f"user {cmd.user_id!r} does not own cube {cmd.cube_id!r}")
        access = CubeAccess(cube_id=cmd.cube_id, owner=cmd.user_id)
    if access.owner != cmd.user_id:
        raise AccessDenied(f"only the owner of cube {cmd.cube_id!r} ({access.owner!r}) may "
                           f"share it; {cmd.user_id!r} may not")
    if isinstance(cmd, ShareCube):
        changed, said = access.shared(cmd.with_user_id, cmd.permission), \
            f"shared with {cmd.with_user_id} ({cmd.permission})"
    else:
        changed, said = access.unshared(cmd.with_user_id), f"unshared from {cmd.with_user_id}"
    await deps.store.graph.set_cube_access(changed)
    return said
