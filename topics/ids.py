"""Deterministic ids: the same input always names the same node or event.

Replays and redeliveries therefore upsert instead of duplicating.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable

# A fixed namespace for memstream's uuid5 ids. Never change it: stored ids depend on it.
NAMESPACE = uuid.UUID("6f1c1f0e-6b1e-4a43-9d55-2f6f0a3c9b71")
_SEP = "\x1f"


def stable_id(*parts: object) -> str:
    """uuid5 over the parts, joined with a separator no id contains."""
    return str(uuid.uuid5(NAMESPACE, _SEP.join(str(p) for p in parts)))


def chunk_source_key(session_id: str | None, messages: Iterable[tuple[str, str, str]]) -> str:
    """The key of one chat chunk: its message ids plus a digest of its session and of what
    was said (role, content). The same chunk published again (a redelivery, the same file
    added twice) gets the same key; chunks that merely reuse message ids — a per-session
    counter such as "m0", "m1" — do not collide and lose what the second one said."""
    listed = list(messages)
    digest = hashlib.sha256(_SEP.join(
        [session_id or "", *(f"{role}{_SEP}{content}" for _, role, content in listed)]
    ).encode()).hexdigest()[:16]
    return "msgs:" + ",".join(message_id for message_id, _, _ in listed) + ":" + digest


def memory_id(cube_id: str, source_key: str, index: int) -> str:
    """Id of the ``index``-th memory extracted from one source (messages or a doc chunk)."""
    return stable_id("memory", cube_id, source_key, index)


def episode_id(cube_id: str, source_key: str) -> str:
    """Id of the episode (the chunk's raw turns, kept whole) of one chat chunk."""
    return stable_id("episode", cube_id, source_key)


def working_copy_id(node_id: str) -> str:
    """Id of the WorkingMemory copy of a long-term node."""
    return stable_id("working-copy", node_id)


def derived_event_id(*parts: object) -> str:
    """Event id of an event derived from another, so a re-run emits the same id."""
    return stable_id("event", *parts).replace("-", "")
