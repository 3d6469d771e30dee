"""What a person said, sealed field by field with its cube's own key, so erasure reaches the log.

Kafka cannot delete one cube's records from a partition it shares with other cubes, and
compaction keeps the latest record per Kafka key (here: the cube), so tombstones cannot
erase a cube's history either. Instead each cube has a random 256-bit AES-GCM key, and the
fields of an event that hold what a person said or what was learnt from it (message text,
memory text, keys, tags, names; marked ``Sealed`` in the models) are sealed with the key of
the event's cube; ``delete_cube`` destroys the key. Whatever copies of the records remain —
in any topic, on any broker, in any backup — can no longer be read, so a replay of an erased
cube finds nothing. ("crypto-shredding")

Everything else of an event (ids, cube, action, types, times, schema version) stays plain
JSON that any Kafka client reads. Each sealed field's value is replaced where it stands by a
reference, ``{"$sealed": i}``, and the values themselves travel in one envelope per record,
at the top of the event::

    "$sealed": {"alg": "A256GCM", "kid": "<16 hex>", "iv": "<base64url, 12 bytes>",
                "ct": "<base64url: ciphertext then the 16-byte tag>", "zip": "deflate"}

- the plaintext is a JSON array of the sealed values in reference order (``i`` indexes it),
  UTF-8, deflated first (raw deflate, RFC 1951) when that is shorter, which ``zip`` says;
- ``kid`` is the first 16 hex digits of SHA-256 of the key: which key, never the key;
- the additional authenticated data is the cube id (UTF-8), so sealed values cannot be moved
  to another cube's event.

One envelope per record rather than one per field: each envelope costs a nonce and a tag
that do not compress, and ciphertext does not compress either, so the text is deflated
together before it is sealed; sealed field by field, the log took 1.45x the broker disk of
the whole-value form it replaced (``bench/log_volume.py``, 100 turns), this way less.
With erasure off (no key directory active), nothing is sealed. ``docs/contracts.md`` shows a
decoder in a few lines of another language; the forms written before this one are read by
``topics/legacy.py``.

Keys live in a directory (``Settings.erasure_key_dir``, default ``<data_dir>/keys``), one
file per cube; ``memstream.security.keys`` keeps them and activates them here. A process
may have several key directories active (tests run pipelines side by side): a key is
looked up in each.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import zlib
from typing import Any

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from pydantic import BaseModel, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from memstream.topics.keysource import KEYRINGS, data_key, unreadable
from memstream.topics.legacy import PREFIX, SCHEME, is_legacy, open_legacy

SEALED_KEY = "$sealed"  # a field's reference, and the record's envelope, both under this key
ALGORITHM = "A256GCM"
NONCE_BYTES = 12
TAG_BYTES = 16  # AES-GCM's authentication tag
ZIP_MIN_BYTES = 160  # shorter texts rarely deflate by enough to pay for the marker
_MARK = b'"' + SEALED_KEY.encode() + b'"'


def key_id(key: bytes) -> str:
    return hashlib.sha256(key).hexdigest()[:16]


class Sealed:
    """Marks a model field as what a person said or what was learnt from it:
    ``Annotated[str, SEALED]``. Its JSON Schema admits the envelope in its place."""

    def __get_pydantic_json_schema__(self, core: CoreSchema,
                                     handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        plain = handler(core)  # the reference inline: any pydantic generator resolves it
        return {"anyOf": [plain, dict(FIELD_REF_SCHEMA)], "x-sealed": True}

    def __repr__(self) -> str:
        return "SEALED"


SEALED = Sealed()

# The JSON Schemas of a sealed field's reference and of the record's envelope
# (``$defs/SealedRef`` and ``$defs/SealedEnvelope`` of every published schema).
FIELD_REF_SCHEMA: dict[str, Any] = {
    "type": "object",
    "title": "SealedRef",
    "description": "A field sealed with its cube's data key: its value is element i of the "
                   "record's $sealed envelope (docs/contracts.md).",
    "required": [SEALED_KEY],
    "properties": {SEALED_KEY: {"type": "integer", "minimum": 0}},
    "additionalProperties": False,
}
ENVELOPE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "title": "SealedEnvelope",
    "description": "The record's sealed values, a JSON array, sealed with its cube's data key "
                   "(AES-256-GCM, the cube id as additional data); see docs/contracts.md.",
    "required": ["alg", "kid", "iv", "ct"],
    "properties": {
        "alg": {"const": ALGORITHM},
        "kid": {"type": "string", "pattern": "^[0-9a-f]{16}$"},
        "iv": {"type": "string", "description": "base64url, 12 bytes"},
        "ct": {"type": "string", "description": "base64url: ciphertext then the 16-byte tag"},
        "zip": {"const": "deflate"},
    },
    "additionalProperties": False,
}


def sealing_active() -> bool:
    return bool(KEYRINGS)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def seal_values(key: bytes, cube_id: str, values: list[Any]) -> dict[str, str]:
    """The envelope of a record's sealed values (a JSON array)."""
    plain = json.dumps(values, separators=(",", ":"), ensure_ascii=False).encode()
    envelope = {"alg": ALGORITHM, "kid": key_id(key)}
    if len(plain) >= ZIP_MIN_BYTES:
        packer = zlib.compressobj(9, zlib.DEFLATED, -15)
        packed = packer.compress(plain) + packer.flush()
        if len(packed) < len(plain):
            plain, envelope["zip"] = packed, "deflate"
    nonce = secrets.token_bytes(NONCE_BYTES)
    envelope["iv"] = _b64(nonce)
    envelope["ct"] = _b64(AESGCM(key).encrypt(nonce, plain, cube_id.encode()))
    return envelope


def open_values(envelope: Any, cube_id: str) -> list[Any]:
    """The values an envelope holds; raises ``ValidationError`` when its key is gone."""
    key = data_key(cube_id, create=False)
    if key is None:
        raise unreadable(f"cube {cube_id!r} was erased (its data key is destroyed)", "")
    try:
        plain = AESGCM(key).decrypt(_unb64(envelope["iv"]), _unb64(envelope["ct"]),
                                    cube_id.encode())
    except (KeyError, TypeError, ValueError):
        raise unreadable("a sealed envelope that is not well formed", str(envelope)) from None
    except Exception:  # noqa: BLE001 - InvalidTag: another key (a cube erased and re-created)
        raise unreadable(f"cube {cube_id!r}: sealed with a key that no longer exists",
                         "") from None
    if envelope.get("zip") == "deflate":
        inflater = zlib.decompressobj(-15)
        plain = inflater.decompress(plain, 64 * 1024 * 1024)
        if inflater.unconsumed_tail:
            raise unreadable("a sealed envelope that opens to more than 64 MiB", "")
    values = json.loads(plain)
    if not isinstance(values, list):
        raise unreadable("a sealed envelope that holds no list of values", "")
    return values


_SEALED_FIELDS: dict[type[BaseModel], tuple[tuple[str, bool], ...]] = {}


def _fields(model: type[BaseModel]) -> tuple[tuple[str, bool], ...]:
    """(JSON name, sealed?) of each field of ``model``, computed once per class."""
    found = _SEALED_FIELDS.get(model)
    if found is None:
        found = tuple((info.alias or name, any(m is SEALED for m in info.metadata))
                      for name, info in model.model_fields.items())
        _SEALED_FIELDS[model] = found
    return found


def _seal_model(model: BaseModel, data: dict[str, Any], values: list[Any]) -> None:
    for name, sealed in _fields(type(model)):
        if name not in data:
            continue
        value = data[name]
        if sealed:
            if value not in (None, "", [], {}):
                data[name] = {SEALED_KEY: len(values)}
                values.append(value)
            continue
        attr = getattr(model, name, None)
        if isinstance(attr, BaseModel) and isinstance(value, dict):
            _seal_model(attr, value, values)
        elif isinstance(attr, tuple | list) and isinstance(value, list):
            for item, item_data in zip(attr, value, strict=False):
                if isinstance(item, BaseModel) and isinstance(item_data, dict):
                    _seal_model(item, item_data, values)


def seal_event(event: BaseModel, plain: bytes, cube_id: str) -> bytes:
    """``plain`` (the event's JSON) with its sealed fields sealed with the cube's key; as it
    is when no key directory is active or nothing in it is to be sealed (then no key is
    made for the cube)."""
    data = json.loads(plain)
    values: list[Any] = []
    _seal_model(event, data, values)
    if not values:
        return plain
    key = data_key(cube_id, create=True)
    if key is None:
        return plain
    data[SEALED_KEY] = seal_values(key, cube_id, values)
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()


def is_sealed(raw: bytes | str) -> bool:
    """Whether a value holds sealed fields (or is sealed whole, in an older form)."""
    data = raw.encode() if isinstance(raw, str) else raw
    return _MARK in data or data.startswith(PREFIX) or data.startswith(b"\x00s")


def _put_back(data: Any, values: list[Any]) -> Any:
    if isinstance(data, dict):
        ref = data.get(SEALED_KEY)
        if len(data) == 1 and isinstance(ref, int):
            if not 0 <= ref < len(values):
                raise unreadable(f"a sealed reference {ref} past the envelope's values", "")
            return values[ref]
        return {k: _put_back(v, values) for k, v in data.items()}
    if isinstance(data, list):
        return [_put_back(v, values) for v in data]
    return data


def open_fields(data: Any) -> Any:
    """A decoded event (JSON data) with every sealed field put back, opened with the key of
    its ``cube_id``."""
    if not isinstance(data, dict) or SEALED_KEY not in data:
        return data
    cube = data.get("cube_id")
    if not isinstance(cube, str):
        raise unreadable("a value with sealed fields names no cube_id", str(data)[:60])
    values = open_values(data[SEALED_KEY], cube)
    rest = {k: v for k, v in data.items() if k != SEALED_KEY}
    return _put_back(rest, values)


def unseal(raw: bytes | str) -> bytes | str:
    """The plain JSON of a value: sealed fields opened, older forms unsealed and inflated
    (``topics/legacy.py``), anything else as it is. An erased cube's value raises a
    ``pydantic.ValidationError``, so every reader treats it as an unreadable record."""
    if is_legacy(raw):
        return open_legacy(raw)
    data = raw.encode() if isinstance(raw, str) else raw
    if _MARK not in data:
        return raw
    try:
        decoded = json.loads(data)
    except ValueError:
        return raw
    return json.dumps(open_fields(decoded), separators=(",", ":"),
                      ensure_ascii=False).encode()


def seal(cube_id: str, plaintext: bytes) -> bytes:
    """``plaintext`` sealed whole with the cube's key, as a small JSON text (for text kept
    outside the log: the scheduler's table); as is when no key directory is active."""
    key = data_key(cube_id, create=True)
    if key is None:
        return plaintext
    nonce = secrets.token_bytes(NONCE_BYTES)
    ct = AESGCM(key).encrypt(nonce, plaintext, cube_id.encode())
    return json.dumps({"enc": SCHEME, "cube": cube_id,
                       "n": base64.b64encode(nonce).decode(),
                       "ct": base64.b64encode(ct).decode()}, separators=(",", ":")).encode()
