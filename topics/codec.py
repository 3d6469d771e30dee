"""Record values, compressed: an event's JSON is deflated before it is sealed.

The embedded broker stores each record byte as a decimal number in one JSON document it
rewrites as it changes, so every byte a record keeps costs disk and CPU again and again;
event JSON (field names, ids, timestamps) deflates 2-4x. Compression comes before sealing
(``topics/sealing.py``): ciphertext does not compress.

A compressed value starts with a marker (a NUL byte, which no JSON text starts with), so
values written before compression, or by producers that do not compress, are read as they
are: the marker is the format's version.

- ``\\x00z1``: zlib (header, deflate, checksum).
- ``\\x00z2`` (issue 25): raw deflate primed with ``DICTIONARY_1``, the field names and
  common values of the contract's events. A record of a few hundred bytes has no history
  of its own to point back to, so its field names cost their full length; primed, they
  cost a few bits each (a quarter less per record on the LoCoMo log). The dictionary is
  part of the format: never edit it, add ``DICTIONARY_2`` behind a new marker instead.
"""

from __future__ import annotations

import zlib

MAGIC_ZLIB = b"\x00z1"
MAGIC = b"\x00z2"  # what ``deflate`` writes
MIN_BYTES = 48  # shorter values rarely shrink enough to pay for the marker
LEVEL = 9
MAX_INFLATED = 64 * 1024 * 1024  # a value never opens to more (a compression bomb stops here)

# Frozen with the ``\x00z2`` format: a reader opens every value written with it by this text.
# Deflate codes a nearer match cheaper, so the commonest strings come last.
DICTIONARY_1 = (
    b'{"schema_version":1,"event_id":"","user_id":"","cube_id":"",'
    b'"occurred_at":"2026-01-01T00:00:00Z",'
    b'"kind":"doc","document":{"doc_id":"","text":"","title":"","uri":""},'
    b'"messages":[{"id":"","role":"user","content":"","timestamp":"","name":""},'
    b'{"id":"","role":"assistant","content":"","timestamp":""}],'
    b'"op":"add","node_ids":[""],"reason":"","queries":[""],"items":[{"id":"","memory":""}],'
    b'"hierarchy_level":"concept","written_by":"rules","source":"retrieved",'
    b'"status":"archived","frozen":true,"origin_id":"","confidence":,"visibility":"public",'
    b'"edges":[{"source":"","target":"","type":"RELATE_TO","reason":"Both memories are about '
    b'"type":"FOLLOWS","type":"CAUSE","type":"CONFLICT","type":"PARENT",'
    b'"type":"AGGREGATE_TO","action":"linked","stage":"reorganize","action":"merged",'
    b'"action":"archived","action":"removed","reason":"merged into ",'
    b'"reason":"redundant: one statement contains the other",'
    b'"node":{"id":"","memory":"","metadata":{"session_id":"session_","type":"topic","key":"",'
    b'"created_at":"2026-","updated_at":"2026-","memory_type":"UserMemory"}},'
    b'"memory_type":"EpisodicMemory","type":"event","type":"opinion","memory_time":"20",'
    b'"chunk_event_id":"","index":1,"count":1,'
    b'"tags":["",""],"background":"","entities":[""],'
    b'"sources":[{"message_id":"","role":"assistant"},{"message_id":"","role":"user"},'
    b'{"topic":"","partition":0,"offset":},{"kind":"memory","memory_id":""}],'
    b'"id":"","memory":"",'
    b'{"schema_version":3,"event_id":"","user_id":"","cube_id":"","occurred_at":"2026-'
    b'"action":"added","stage":"memory.add","node_id":"","memory_type":"LongTermMemory",'
    b'"related_ids":[""],"removed_ids":[""],"cause_event_id":"",'
    b'"origin":{"topic":"","partition":0,"offset":}}'
)
_RAW = -15  # raw deflate: no zlib header or checksum (a sealed value has its own tag)


class Unreadable(ValueError):
    """A compressed value that does not inflate (damaged, or over ``MAX_INFLATED``)."""


def deflate(data: bytes) -> bytes:
    """``data`` compressed behind the marker, or as it is when that is not shorter."""
    if len(data) < MIN_BYTES:
        return data
    packer = zlib.compressobj(LEVEL, zlib.DEFLATED, _RAW, zdict=DICTIONARY_1)
    packed = MAGIC + packer.compress(data) + packer.flush()
    return packed if len(packed) < len(data) else data


def is_deflated(data: bytes | str) -> bool:
    return isinstance(data, bytes) and (data.startswith(MAGIC) or data.startswith(MAGIC_ZLIB))


def inflate(data: bytes | str, max_bytes: int = MAX_INFLATED) -> bytes | str:
    """The original bytes of a ``deflate``d value (either marker); any other value as it is."""
    if not is_deflated(data):
        return data
    assert isinstance(data, bytes)  # noqa: S101 - is_deflated checked it
    primed = data.startswith(MAGIC)
    inflater = zlib.decompressobj(_RAW, zdict=DICTIONARY_1) if primed else zlib.decompressobj()
    try:
        out = inflater.decompress(data[len(MAGIC):], max_bytes)
        if primed and not inflater.unconsumed_tail:
            out += inflater.flush()
    except zlib.error as exc:
        raise Unreadable(f"a compressed value that does not inflate ({exc})") from None
    if inflater.unconsumed_tail or not inflater.eof:
        raise Unreadable(f"a compressed value that opens to more than {max_bytes:,} bytes, "
                         "or is cut short")
    return out
