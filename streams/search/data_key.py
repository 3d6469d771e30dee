"""The ``data_key`` op: a cube's data key for a subscriber that may read the cube, so any
Kafka client can open the sealed fields of the cube's records (docs/erasure.md).

The key leaves wrapped with RSA-OAEP (SHA-256) for the public key the request names: the
reply is a record on a topic, kept for minutes, read by whoever reads that topic. Who may
ask is decided before this runs, as for a search: the signature (when signing is enforced)
and the read check of ``streams.search.logic.answer``.

Its replies are sent unsealed (``OPEN_REPLIES``): they hold no text of the cube (a wrapped
key, or an error naming ids), the requester has no key yet to open a sealed error with, and
sealing a reply to a cube that has no key would make the cube one just for being asked about.
"""

from __future__ import annotations

import base64
from dataclasses import fields
from typing import Any

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.hazmat.primitives.serialization import load_pem_public_key
from pydantic import BaseModel

from memstream.topics.events import DataKeyRequest, DataKeyResult
from memstream.topics.keysource import data_key
from memstream.topics.registry import REPLIES, TopicSpec
from memstream.topics.sealing import key_id

MIN_BITS, MAX_BITS = 2048, 4096


class BadPublicKey(ValueError):
    """The request's public key is not an RSA key of 2048 to 4096 bits in PEM."""


class NoDataKey(LookupError):
    """The cube has no data key: nothing sealed was written to it yet (or since its key was
    destroyed: the worker seals its erasure announcement with a new one), or erasure is off
    (then its records are plain JSON)."""


class _OpenReplies(TopicSpec):
    """``REPLIES``, written as plain JSON whether or not erasure is on."""

    def encode(self, event: BaseModel, plain: bytes | None = None) -> bytes:
        return self.plain(event) if plain is None else plain


OPEN_REPLIES = _OpenReplies(**{f.name: getattr(REPLIES, f.name) for f in fields(REPLIES)})


def reply_spec(address: dict[str, Any]) -> TopicSpec:
    """How the reply to the request at ``address`` is written (by its ``op``)."""
    return OPEN_REPLIES if address.get("op") == "data_key" else REPLIES


def rsa_public_key(pem: str) -> rsa.RSAPublicKey:
    try:
        key = load_pem_public_key(pem.encode("utf-8"))
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise BadPublicKey("public_key: not a PEM public key (SubjectPublicKeyInfo, "
                           f"'-----BEGIN PUBLIC KEY-----'): {exc}") from None
    if not isinstance(key, rsa.RSAPublicKey):
        raise BadPublicKey(f"public_key: an RSA key is needed, not {type(key).__name__}")
    if not MIN_BITS <= key.key_size <= MAX_BITS:
        raise BadPublicKey(f"public_key: RSA keys of {MIN_BITS} to {MAX_BITS} bits are "
                           f"accepted, not {key.key_size}")
    return key


def data_key_result(req: DataKeyRequest) -> DataKeyResult:
    """The cube's key wrapped for ``req.public_key``; ``BadPublicKey`` or ``NoDataKey``."""
    public = rsa_public_key(req.public_key)
    key = data_key(req.cube_id, create=False)
    if key is None:
        raise NoDataKey(f"cube {req.cube_id!r} has no data key: nothing sealed was written "
                        "to it (yet, or since its key was destroyed), or erasure is off (then "
                        "its records are not sealed)")
    wrapped = public.encrypt(key, padding.OAEP(mgf=padding.MGF1(hashes.SHA256()),
                                               algorithm=hashes.SHA256(), label=None))
    return DataKeyResult(kid=key_id(key), wrapped_key=base64.b64encode(wrapped).decode())
