"""The value formats written before events became readable JSON: still read, never written.

- ``\\x00s2`` (``seal_value``): a whole value sealed in binary: ``MAGIC``, the cube id's
  length (2 bytes, big-endian) and UTF-8 bytes, a 12-byte nonce, then the AES-GCM ciphertext;
  the marker and cube id are the authenticated data. Its plaintext was usually deflated
  (``topics/codec.py``).
- ``{"enc": "ms-aesgcm-1", "cube": …, "n": …, "ct": …}``: the first whole-value envelope
  (base64 nonce and ciphertext). ``sealing.seal`` still writes it for text the scheduler keeps
  in its table; ``open_legacy`` reads it.
- ``\\x00z1`` / ``\\x00z2``: a value deflated by hand (``topics/codec.py``), unsealed.

The recorded v1 log (``tests/fixtures``) holds these forms, and a replay of it must rebuild
identical stores, so every reader opens them through ``open_legacy``.
"""

from __future__ import annotations

import base64
import json
import secrets

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from memstream.topics.codec import Unreadable, inflate
from memstream.topics.keysource import data_key, unreadable

SCHEME = "ms-aesgcm-1"  # the whole-value JSON envelope
PREFIX = b'{"enc":"' + SCHEME.encode() + b'"'
MAGIC = b"\x00s2"
_NONCE = 12


def is_legacy(raw: bytes | str) -> bool:
    """Whether ``raw`` is in one of the forms above (a NUL-marked or whole-sealed value)."""
    data = raw.encode() if isinstance(raw, str) else raw
    return data.startswith(b"\x00") or data.startswith(PREFIX)


def open_legacy(raw: bytes | str) -> bytes | str:
    """The plain JSON of a value in an old form (others as they are); an erased cube's value
    raises a ``pydantic.ValidationError`` so every reader treats it as unreadable."""
    if isinstance(raw, bytes) and raw.startswith(MAGIC):
        return _inflate(_unseal_binary(raw))
    if not _whole_sealed(raw):
        return _inflate(raw)
    return _inflate(unseal_v1(raw))


def _whole_sealed(raw: bytes | str) -> bool:
    data = raw.encode() if isinstance(raw, str) else raw
    return data.startswith(PREFIX) or data.startswith(MAGIC)


def seal_value(cube_id: str, plaintext: bytes) -> bytes:
    """``plaintext`` sealed in the binary form (as is when no key directory is active): only
    tests write it now, to check that such records are still read."""
    key = data_key(cube_id, create=True)
    if key is None:
        return plaintext
    cube = cube_id.encode()
    head = MAGIC + len(cube).to_bytes(2, "big") + cube
    nonce = secrets.token_bytes(_NONCE)
    return head + nonce + AESGCM(key).encrypt(nonce, plaintext, head)


def _unseal_binary(raw: bytes) -> bytes:
    size = int.from_bytes(raw[len(MAGIC):len(MAGIC) + 2], "big")
    start = len(MAGIC) + 2
    head, rest = raw[:start + size], raw[start + size:]
    try:
        cube = raw[start:start + size].decode()
    except UnicodeDecodeError:
        raise unreadable("a sealed value that is not well formed", raw) from None
    if len(rest) <= _NONCE:
        raise unreadable("a sealed value that is not well formed", raw)
    key = data_key(cube, create=False)
    if key is None:
        raise unreadable(f"cube {cube!r} was erased (its data key is destroyed)", raw)
    try:
        return AESGCM(key).decrypt(rest[:_NONCE], rest[_NONCE:], head)
    except Exception:  # noqa: BLE001 - InvalidTag: another key (a cube erased and re-created)
        raise unreadable(f"cube {cube!r}: sealed with a key that no longer exists", raw) \
            from None


def _inflate(data: bytes | str) -> bytes | str:
    try:
        return inflate(data)
    except Unreadable as exc:
        raise unreadable(str(exc), data) from None


def unseal_v1(raw: bytes | str) -> bytes:
    try:
        envelope = json.loads(raw)
        cube = str(envelope["cube"])
        nonce, ct = base64.b64decode(envelope["n"]), base64.b64decode(envelope["ct"])
    except (ValueError, KeyError, TypeError):
        raise unreadable("a sealed value that is not well formed", raw) from None
    key = data_key(cube, create=False)
    if key is None:
        raise unreadable(f"cube {cube!r} was erased (its data key is destroyed)", raw)
    try:
        return AESGCM(key).decrypt(nonce, ct, cube.encode())
    except Exception:  # noqa: BLE001 - InvalidTag: another key (a cube erased and re-created)
        raise unreadable(f"cube {cube!r}: sealed with a key that no longer exists", raw) \
            from None
