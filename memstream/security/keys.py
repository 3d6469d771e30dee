"""The cubes' data keys: one file each under a directory, destroyed to erase a cube.

A value is sealed with its cube's key (``topics/sealing.py``, the format); this module keeps
the keys. Producers and workers must share the directory (one machine: the data dir;
several: a shared volume, or a KMS behind the same two calls).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
from pathlib import Path

from memstream.topics.keysource import KEYRINGS


class Keyring:
    """The data keys of every cube, one file each, under ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path(self, cube_id: str) -> Path:
        return self.directory / f"{hashlib.sha256(cube_id.encode()).hexdigest()}.key"

    def get(self, cube_id: str) -> bytes | None:
        try:
            key = self.path(cube_id).read_bytes()
        except FileNotFoundError:
            return None
        return key if len(key) == 32 else None

    def create(self, cube_id: str) -> bytes:
        """The cube's key, made now if it has none (the first writer wins a race)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        final = self.path(cube_id)
        tmp = final.with_name(f".{final.name}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, secrets.token_bytes(32))
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, final)  # fails if another process made it first: use theirs
        except FileExistsError:
            pass
        finally:
            tmp.unlink(missing_ok=True)
        key = self.get(cube_id)
        if key is None:
            raise OSError(f"cannot create the data key of cube {cube_id!r} in {self.directory}")
        return key

    def destroy(self, cube_id: str) -> bool:
        """Delete the cube's key; returns whether there was one."""
        path = self.path(cube_id)
        if not path.exists():
            return False
        # overwrite first, where the filesystem allows
        with contextlib.suppress(OSError), path.open("r+b") as fh:
            fh.write(secrets.token_bytes(32))
            fh.flush()
            os.fsync(fh.fileno())
        path.unlink(missing_ok=True)
        return True


_USERS: dict[Path, int] = {}


def activate(directory: Path) -> Keyring:
    """Seal and open values with the keys in ``directory`` in this process, until every
    ``activate`` of it is matched by a ``release`` (workers and clients on stop)."""
    directory = directory.resolve()
    _USERS[directory] = _USERS.get(directory, 0) + 1
    for ring in KEYRINGS:
        if isinstance(ring, Keyring) and ring.directory == directory:
            return ring
    ring = Keyring(directory)
    KEYRINGS.insert(0, ring)
    return ring


def release(directory: Path) -> None:
    directory = directory.resolve()
    _USERS[directory] = _USERS.get(directory, 1) - 1
    if _USERS[directory] <= 0:
        del _USERS[directory]
        KEYRINGS[:] = [r for r in KEYRINGS
                       if not (isinstance(r, Keyring) and r.directory == directory)]


def destroy(cube_id: str) -> bool:
    """Destroy the cube's key in every active key directory."""
    return any([ring.destroy(cube_id) for ring in KEYRINGS if isinstance(ring, Keyring)])
