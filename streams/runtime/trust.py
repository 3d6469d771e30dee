"""A worker's check of each consumed event's signature (``security.signing``).

Called where records are decoded, before any access check: an event refused here is
dead-lettered (a request gets an error reply) with the reason, and nothing of it is stored.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Protocol

from pydantic import BaseModel

from memstream.security.signing import SignatureRefused, Verifier


class RawRecord(Protocol):
    """What is checked of a consumed record (``streams.runtime.RawRecord``)."""

    @property
    def value(self) -> bytes | None: ...

    @property
    def headers(self) -> Sequence[tuple[str, bytes]]: ...

    @property
    def timestamp_ms(self) -> int | None: ...

def written_at(raw: RawRecord) -> datetime | None:
    """When the record entered the log (its Kafka timestamp), if known."""
    return None if raw.timestamp_ms is None else \
        datetime.fromtimestamp(raw.timestamp_ms / 1000, UTC)


def verify_record(verifier: Verifier | None, raw: RawRecord, event: BaseModel) -> None:
    """Raise ``SignatureRefused`` unless ``event``'s user and cube are vouched for (no
    verifier: keys are not configured, every event is trusted)."""
    if verifier is None:
        return
    user_id, cube_id = getattr(event, "user_id", None), getattr(event, "cube_id", None)
    if not isinstance(user_id, str) or not isinstance(cube_id, str):
        raise SignatureRefused(f"{type(event).__name__} names no user and cube to verify")
    verifier.verify(raw.headers, raw.value or b"", user_id, cube_id, written_at(raw))
