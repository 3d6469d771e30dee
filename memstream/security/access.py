"""Who may use a cube: its owner, and the users it is shared with.

A cube's first writer becomes its owner; the owner shares it for reading or writing with
``share_cube`` and withdraws that with ``unshare_cube``. A cube with no record yet is
readable by the user of the same id (the default cube of a user), and one written before
access records existed belongs to the user its memories name.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

Permission = Literal["read", "write"]


class CubeAccess(BaseModel):
    """The access record of one cube, stored next to its memories in the graph store."""

    model_config = ConfigDict(frozen=True)

    cube_id: str
    owner: str
    readers: tuple[str, ...] = ()  # may read (search, get, subgraph, dump, ...)
    writers: tuple[str, ...] = ()  # may also write (add, commands); writers can read

    def may_read(self, user_id: str) -> bool:
        return user_id == self.owner or user_id in self.readers or user_id in self.writers

    def may_write(self, user_id: str) -> bool:
        return user_id == self.owner or user_id in self.writers

    def shared(self, user_id: str, permission: Permission) -> CubeAccess:
        readers = tuple(u for u in self.readers if u != user_id)
        writers = tuple(u for u in self.writers if u != user_id)
        if permission == "write":
            writers = (*writers, user_id)
        else:
            readers = (*readers, user_id)
        return self.model_copy(update={"readers": readers, "writers": writers})

    def unshared(self, user_id: str) -> CubeAccess:
        return self.model_copy(update={
            "readers": tuple(u for u in self.readers if u != user_id),
            "writers": tuple(u for u in self.writers if u != user_id)})
