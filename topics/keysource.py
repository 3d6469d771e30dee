"""Where the cubes' data keys are found in this process (``memstream.security.keys`` puts
them here), and the error every reader raises for a value it cannot open."""

from __future__ import annotations

from typing import Protocol

from pydantic import ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError


class KeySource(Protocol):
    """Where a cube's data key is found (``memstream.security.keys.Keyring``: a directory)."""

    def get(self, cube_id: str) -> bytes | None: ...

    def create(self, cube_id: str) -> bytes: ...


# The key sources in force in this process, newest first (``memstream.security.keys``
# activates and releases them).
KEYRINGS: list[KeySource] = []


def data_key(cube_id: str, create: bool) -> bytes | None:
    for ring in KEYRINGS:
        if (key := ring.get(cube_id)) is not None:
            return key
    return KEYRINGS[0].create(cube_id) if create and KEYRINGS else None


def unreadable(message: str, raw: bytes | str) -> ValidationError:
    return ValidationError.from_exception_data("sealed value", [InitErrorDetails(
        type=PydanticCustomError("erased", message), loc=(), input=str(raw)[:60])])
