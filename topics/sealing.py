"""How a value is sealed with its cube's own data key, so erasure reaches the log.

Kafka cannot delete one cube's records from a partition it shares with other cubes, and
compaction keeps the latest record per Kafka key (here: the cube), so tombstones cannot
erase a cube's history either. Instead each cube has a random 256-bit AES-GCM key; every
value written through the contract (``TopicSpec.encode``) is sealed with the key of the
cube it belongs to, and ``delete_cube`` destroys the key. Whatever copies of the records
remain — in any topic, on any broker, in any backup — can no longer be read, so a replay
of an erased cube finds nothing. ("crypto-shredding")

Record values are sealed in binary (``seal_value``): ``MAGIC`` (``\\x00s2``), the cube id's
length (2 bytes, big-endian) and UTF-8 bytes, the 12-byte nonce, then the ciphertext; the
marker and cube id are the authenticated data. The plaintext is usually compressed first
(``topics/codec.py``). Records written before that carry the first form, a small JSON
object ``{"enc": "ms-aesgcm-1", "cube": …, "n": …, "ct": …}`` (base64 nonce and ciphertext,
about 1.4x the plaintext), which ``seal`` still writes where a text is needed (the
scheduler's state) and ``unseal`` still reads. Values that are not sealed (other producers,
older records) are read as they are.

Keys live in a directory (``Settings.erasure_key_dir``, default ``<data_dir>/keys``), one
file per cube named by a hash of the cube id, created atomically by whichever process
needs it first. Producers and workers must share it (one machine: the data dir; several:
a shared volume or a KMS behind the same two calls). A process may have several key
directories active (tests run pipelines side by side): a key is looked up in each.
"""

from __future__ import annotations

import base64
import json
import secrets
from typing import Protocol

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from pydantic import ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

from memstream.topics.codec import Unreadable, inflate

SCHEME = "ms-aesgcm-1"
PREFIX = b'{"enc":"' + SCHEME.encode() + b'"'
MAGIC = b"\x00s2"
_NONCE = 12
_TAG = 16  # AES-GCM's authentication tag


class KeySource(Protocol):
    """Where a cube's data key is found (``memstream.security.keys.Keyring``: a directory)."""

    def get(self, cube_id: str) -> bytes | None: ...

    def create(self, cube_id: str) -> bytes: ...


# The key sources in force in this process, newest first (``memstream.security.keys``
# activates and releases them).
KEYRINGS: list[KeySource] = []


def _key(cube_id: str, create: bool) -> bytes | None:
    for ring in KEYRINGS:
        if (key := ring.get(cube_id)) is not None:
            return key
    return KEYRINGS[0].create(cube_id) if create and KEYRINGS else None


def seal(cube_id: str, plaintext: bytes) -> bytes:
    """``plaintext`` sealed with the cube's key (as is when no key directory is active)."""
    key = _key(cube_id, create=True)
    if key is None:
        return plaintext
    nonce = secrets.token_bytes(_NONCE)
    ct = AESGCM(key).encrypt(nonce, plaintext, cube_id.encode())
    return json.dumps({"enc": SCHEME, "cube": cube_id,
                       "n": base64.b64encode(nonce).decode(),
                       "ct": base64.b64encode(ct).decode()}, separators=(",", ":")).encode()


def sealing_overhead(cube_id: str) -> int:
    """At most how many bytes ``seal_value`` adds to a value of ``cube_id``."""
    return len(MAGIC) + 2 + len(cube_id.encode()) + _NONCE + _TAG


def seal_value(cube_id: str, plaintext: bytes) -> bytes:
    """``plaintext`` sealed in the binary form (as is when no key directory is active)."""
    key = _key(cube_id, create=True)
    if key is None:
        return plaintext
    cube = cube_id.encode()
    head = MAGIC + len(cube).to_bytes(2, "big") + cube
    nonce = secrets.token_bytes(_NONCE)
    return head + nonce + AESGCM(key).encrypt(nonce, plaintext, head)


def is_sealed(raw: bytes | str) -> bool:
    data = raw.encode() if isinstance(raw, str) else raw
    return data.startswith(PREFIX) or data.startswith(MAGIC)


def _unseal_binary(raw: bytes) -> bytes:
    size = int.from_bytes(raw[len(MAGIC):len(MAGIC) + 2], "big")
    start = len(MAGIC) + 2
    head, rest = raw[:start + size], raw[start + size:]
    try:
        cube = raw[start:start + size].decode()
    except UnicodeDecodeError:
        raise _unreadable("a sealed value that is not well formed", raw) from None
    if len(rest) <= _NONCE:
        raise _unreadable("a sealed value that is not well formed", raw)
    key = _key(cube, create=False)
    if key is None:
        raise _unreadable(f"cube {cube!r} was erased (its data key is destroyed)", raw)
    try:
        return AESGCM(key).decrypt(rest[:_NONCE], rest[_NONCE:], head)
    except Exception:  # noqa: BLE001 - InvalidTag: another key (a cube erased and re-created)
        raise _unreadable(f"cube {cube!r}: sealed with a key that no longer exists", raw) \
            from None


def unseal(raw: bytes | str) -> bytes | str:
    """The plaintext of a sealed value, inflated when it was compressed (others as they
    are); an erased cube's value raises a ``pydantic.ValidationError`` so every reader
    treats it as an unreadable record (so does a damaged compressed one)."""
    if isinstance(raw, bytes) and raw.startswith(MAGIC):
        return _inflate(_unseal_binary(raw))
    if not is_sealed(raw):
        return _inflate(raw)
    return _inflate(_unseal_v1(raw))


def _inflate(data: bytes | str) -> bytes | str:
    try:
        return inflate(data)
    except Unreadable as exc:
        raise _unreadable(str(exc), data) from None


def _unseal_v1(raw: bytes | str) -> bytes:
    try:
        envelope = json.loads(raw)
        cube = str(envelope["cube"])
        nonce, ct = base64.b64decode(envelope["n"]), base64.b64decode(envelope["ct"])
    except (ValueError, KeyError, TypeError):
        raise _unreadable("a sealed value that is not well formed", raw) from None
    key = _key(cube, create=False)
    if key is None:
        raise _unreadable(f"cube {cube!r} was erased (its data key is destroyed)", raw)
    try:
        return AESGCM(key).decrypt(nonce, ct, cube.encode())
    except Exception:  # noqa: BLE001 - InvalidTag: another key (a cube erased and re-created)
        raise _unreadable(f"cube {cube!r}: sealed with a key that no longer exists", raw) \
            from None


def _unreadable(message: str, raw: bytes | str) -> ValidationError:
    return ValidationError.from_exception_data("sealed value", [InitErrorDetails(
        type=PydanticCustomError("erased", message), loc=(), input=str(raw)[:60])])
